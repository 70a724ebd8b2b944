// What a route returns, independent of the HTTP library: a status and a body, either complete or
// produced piece by piece (a stream of server-sent events, or a JSON document that is ready only when
// generation ends).
#pragma once
#include <chrono>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

namespace dsv4::server {

using Json = nlohmann::ordered_json;

// JSON text; invalid UTF-8 (a token's bytes may be part of a character) becomes U+FFFD.
std::string dump_json(const Json& j);

struct ApiRequest {
  std::string body;
  std::string path_arg;  // the part of the path a route's pattern captures (e.g. a model id)
};

class ReplyStream {
 public:
  virtual ~ReplyStream() = default;
  // Appends the next piece of the body to `out`, waiting at most `wait` for it (`out` may stay
  // empty). Returns false once the body is complete.
  virtual bool next(std::string& out, std::chrono::milliseconds wait) = 0;
  // The client went away, or the body will not be sent: stop the work behind it. Idempotent.
  virtual void cancel() = 0;
  // The status of a body sent whole, final once next() returned false (a generation that failed is
  // a 5xx). A text/event-stream body's stays 200: its head went out first.
  virtual int status() const { return 200; }
};

// How the HTTP layer sends a streamed reply:
// - text/event-stream: at once with status 200, each piece as it comes; a failure is told in the
//   stream (an error event, then "data: [DONE]").
// - any other type (a non-streamed completion): whole. The layer pulls next() to the end (checking
//   meanwhile that the client is still there, else cancel()), then answers status() with the body,
//   so that a failed generation answers its 5xx and never a 200 with an error body.
struct Reply {
  int status = 200;  // of a complete body; a streamed one's is stream->status()
  std::string content_type = "application/json";
  std::string body;                     // a complete body, or
  std::shared_ptr<ReplyStream> stream;  // a body produced piece by piece

  bool sent_whole() const { return !stream || content_type != "text/event-stream"; }

  static Reply json(const Json& j, int status = 200);
};

}  // namespace dsv4::server
