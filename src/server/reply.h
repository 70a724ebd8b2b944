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
  // A body that is not text/event-stream is collected whole before the head is sent; this status,
  // asked once next() returned false, replaces Reply::status when not 0 (a generation that failed
  // answers its real 5xx without blocking a thread while it runs).
  virtual int final_status() const { return 0; }
};

struct Reply {
  int status = 200;
  std::string content_type = "application/json";
  std::string body;                     // a complete body, or
  std::shared_ptr<ReplyStream> stream;  // a body produced piece by piece

  static Reply json(const Json& j, int status = 200);
};

}  // namespace dsv4::server
