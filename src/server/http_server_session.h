// Inside the HTTP front (http_server*.cpp only): the state every connection shares, and one connection
// (a Session) that reads requests, checks them, runs their route and writes the reply, all on its own
// strand of the I/O threads.
#pragma once
#include <utility>  // before Asio: Boost 1.74's awaitable.hpp uses std::exchange without it

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <regex>
#include <string>
#include <vector>

#include "server/api_error.h"
#include "server/http_server.h"
#include "server/routes.h"

namespace dsv4::server::http_detail {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;

class Session;

inline std::string_view sv(beast::string_view v) { return {v.data(), v.size()}; }

struct ServerState {
  ServerState(ServerContext& c, HttpOptions o);

  ServerContext& ctx;
  HttpOptions opt;
  std::vector<std::pair<const Route*, std::regex>> table;
  asio::thread_pool workers;
  bool loopback = false;  // bound to a loopback address: check Host
  std::atomic<bool> draining{false};
  std::atomic<int> connections{0};  // sessions counted against opt.max_connections

  // The route a path falls under for `method` ("" = any), with its capture, or nullptr.
  const Route* route_of(const std::string& path, const std::string& method, std::string* capture = nullptr) const;

  // Every live session, for drain() and stop().
  std::mutex mu;
  std::map<uint64_t, std::weak_ptr<Session>> sessions;
  uint64_t next_id = 0;
  uint64_t add(const std::shared_ptr<Session>& s);
  void remove(uint64_t id);
  std::vector<std::shared_ptr<Session>> live();
};

class Session : public std::enable_shared_from_this<Session> {
 public:
  // `counted`: holds one of opt.max_connections; otherwise the session only answers 503 and closes.
  Session(ServerState& st, tcp::socket sock, bool counted);
  ~Session();
  void start();           // serve requests
  void start_rejected();  // over the connection limit: 503 with Retry-After, then close
  void drain();           // posted: close now unless a request is being answered
  void stop();            // posted: close now

 private:
  enum class Phase { Idle, Head, Body, Handling, Replying, Closing };
  using Parser = http::request_parser<http::string_body>;

  void read_next();   // the next request on a keep-alive connection (Idle, then Head)
  void read_head();
  void on_head(beast::error_code ec);
  void read_body();
  void on_body(beast::error_code ec);
  void dispatch();
  void reply(Reply r);  // from dispatch, on the strand
  void write_complete(Reply r, bool close);
  void stream_head();
  void pull();          // the next piece of a streamed body
  void write_chunk(std::string data, bool last);
  void end_stream();
  void on_written(beast::error_code ec, bool close);
  // An error answered before the route ran; the connection closes unless `keep` (nothing of the
  // request is left unread) and the client keeps it alive.
  void fail(const ApiError& e, bool keep = false);
  void linger_close();  // stop sending, read and drop what the client still sends, then close
  void linger_more();
  void close_now();
  void watch_peer();    // while a reply is prepared: a client that hangs up cancels it
  void stop_watch();
  void arm(double seconds);  // the deadline of the current phase; on expiry the pending I/O is cancelled
  void disarm();
  template <class Res> void add_headers(Res& res, int status, bool close);
  bool keep_alive() const;

  ServerState& st_;
  tcp::socket sock_;
  bool counted_;
  uint64_t id_ = 0;
  beast::flat_buffer buf_;
  std::optional<Parser> parser_;
  asio::steady_timer deadline_, poll_;
  Phase phase_ = Phase::Head;
  bool timed_out_ = false, closed_ = false, requested_close_ = false, preflight_ = false, watching_ = false;
  uint64_t arm_epoch_ = 0, watch_epoch_ = 0;  // a timer or a watch of an older epoch is stale
  // The request being answered.
  const Route* route_ = nullptr;
  std::string capture_, route_name_ = "unmatched", cors_origin_;
  // The reply being written.
  std::shared_ptr<ReplyStream> stream_;
  bool sse_ = false, stream_counted_ = false;
  std::string stream_out_, doc_;
  int reply_status_ = 200;
  std::string reply_type_;
  std::chrono::milliseconds backoff_{1};
  std::vector<char> discard_;
};

}  // namespace dsv4::server::http_detail
