#include "server/http_server_session.h"

#include <algorithm>
#include <cstdio>

#include "core/error.h"
#include "server/http_server_policy.h"

namespace dsv4::server::http_detail {
namespace {

using std::chrono::milliseconds;
constexpr milliseconds kPollFirst{1}, kPollMax{100};  // a stream with nothing new is looked at again after
constexpr double kLingerSeconds = 2;                 // reading what a refused client still sends
constexpr size_t kMaxTarget = 4096;                  // longer paths: 414 (and no regex over them)

bool is_sse(const std::string& content_type) { return content_type.rfind("text/event-stream", 0) == 0; }

std::string body_too_large(const HttpOptions& o) {
  return cat("the request body is too large (at most ", o.max_body_bytes, " bytes; see --max-body-bytes)");
}

// The answer to a request the HTTP parser refused.
ApiError transport_error(beast::error_code ec, const HttpOptions& o) {
  if (ec == http::error::header_limit || ec == http::error::buffer_overflow)
    return ApiError(431, cat("the request head is too large (at most ", o.max_header_bytes,
                             " bytes of request line and headers)"));
  if (ec == http::error::body_limit) return ApiError(413, body_too_large(o));
  if (ec == http::error::bad_content_length)
    return ApiError(400, "malformed Content-Length: one non-negative decimal number is expected, without "
                         "Transfer-Encoding beside it");
  if (ec == http::error::bad_transfer_encoding)
    return ApiError(400, "malformed Transfer-Encoding: \"chunked\" once, without Content-Length beside it");
  if (ec == http::error::bad_target)
    return ApiError(400, "malformed request target: the path holds a NUL, a control character or a byte not "
                         "allowed in a URL");
  return ApiError(400, cat("malformed HTTP request (", ec.message(), ")"));
}

bool hung_up(beast::error_code ec) {
  return ec == http::error::end_of_stream || ec == http::error::partial_message || ec == asio::error::eof ||
         ec == asio::error::connection_reset || ec == asio::error::operation_aborted ||
         ec == asio::error::bad_descriptor;
}

Reply call_route(const Route& route, ServerContext& ctx, const ApiRequest& a) {
  try {
    return route.handler(ctx, a);
  } catch (...) {
    const ApiError e = to_api_error(std::current_exception());
    return Reply::json(error_json(e), e.status);
  }
}

}  // namespace

Session::Session(ServerState& st, tcp::socket sock, bool counted)
    : st_(st), sock_(std::move(sock)), counted_(counted), buf_(st.opt.max_header_bytes + 65536),
      deadline_(sock_.get_executor()), poll_(sock_.get_executor()) {
  if (counted_) ++st_.connections;
}

Session::~Session() {
  if (stream_) stream_->cancel();
  if (stream_counted_) st_.ctx.http.stream_ended();
  st_.remove(id_);
  if (counted_) --st_.connections;
}

void Session::start() {
  id_ = st_.add(shared_from_this());
  asio::dispatch(sock_.get_executor(), [self = shared_from_this()] { self->read_head(); });
}

void Session::start_rejected() {
  id_ = st_.add(shared_from_this());
  asio::dispatch(sock_.get_executor(), [self = shared_from_this()] {
    self->fail(ApiError(503, cat("too many connections (at most ", self->st_.opt.max_connections,
                                 "; see --max-connections): retry later"),
                        "", "overloaded"));
  });
}

void Session::drain() {
  asio::post(sock_.get_executor(), [self = shared_from_this()] {
    const Phase p = self->phase_;
    if (p == Phase::Idle || p == Phase::Head || p == Phase::Body || p == Phase::Closing) self->close_now();
  });
}

void Session::stop() {
  asio::post(sock_.get_executor(), [self = shared_from_this()] { self->close_now(); });
}

void Session::arm(double seconds) {
  const uint64_t epoch = ++arm_epoch_;
  timed_out_ = false;
  deadline_.expires_after(std::chrono::duration_cast<asio::steady_timer::duration>(std::chrono::duration<double>(seconds)));
  deadline_.async_wait([self = shared_from_this(), epoch](beast::error_code ec) {
    if (ec || epoch != self->arm_epoch_ || self->closed_) return;
    self->timed_out_ = true;
    beast::error_code ignored;
    self->sock_.cancel(ignored);
  });
}

void Session::disarm() {
  ++arm_epoch_;
  deadline_.cancel();
}

bool Session::keep_alive() const { return !requested_close_ && !st_.draining; }

template <class Res>
void Session::add_headers(Res& res, int status, bool close) {
  res.set(http::field::server, "dsv4");
  if (status == 503) res.set(http::field::retry_after, "1");
  if (!cors_origin_.empty()) {
    res.set(http::field::access_control_allow_origin, cors_origin_);
    res.set(http::field::vary, "Origin");
  }
  if (preflight_) {
    res.set(http::field::allow, "GET, POST, OPTIONS");
    if (!cors_origin_.empty()) {
      res.set(http::field::access_control_allow_methods, "GET, POST, OPTIONS");
      const auto asked = parser_ ? parser_->get()[http::field::access_control_request_headers] : beast::string_view();
      res.set(http::field::access_control_allow_headers,
              asked.empty() ? beast::string_view("Authorization, Content-Type") : asked);
      res.set(http::field::access_control_max_age, "600");
    }
  }
  res.keep_alive(!close);
}

// ---- reading a request ----------------------------------------------------------------------------

void Session::read_next() {
  if (closed_) return;
  route_ = nullptr;
  route_name_ = "unmatched";
  cors_origin_.clear();
  capture_.clear();
  preflight_ = requested_close_ = false;
  backoff_ = kPollFirst;
  if (buf_.size() > 0) return read_head();  // a pipelined request is already here
  phase_ = Phase::Idle;
  arm(st_.opt.idle_timeout_s);
  sock_.async_wait(tcp::socket::wait_read, [self = shared_from_this()](beast::error_code ec) {
    if (self->closed_) return;
    if (ec) return self->close_now();  // the idle timeout, or the client left
    self->read_head();
  });
}

void Session::read_head() {
  phase_ = Phase::Head;
  arm(st_.opt.header_timeout_s);
  parser_.emplace();
  parser_->header_limit(uint32_t(std::min<size_t>(st_.opt.max_header_bytes, UINT32_MAX)));
  parser_->body_limit(uint64_t(st_.opt.max_body_bytes));
  http::async_read_header(sock_, buf_, *parser_,
                          [self = shared_from_this()](beast::error_code ec, size_t) { self->on_head(ec); });
}

void Session::on_head(beast::error_code ec) {
  if (closed_) return;
  const HttpOptions& o = st_.opt;
  if (ec && timed_out_)
    return fail(ApiError(408, cat("the request head did not arrive within ", o.header_timeout_s,
                                  " s (see --header-timeout)")));
  if (ec && hung_up(ec)) return close_now();
  if (ec) return fail(transport_error(ec, o));

  const auto& req = parser_->get();
  requested_close_ = !req.keep_alive();
  if (size_t(std::distance(req.begin(), req.end())) > size_t(o.max_headers))
    return fail(ApiError(431, cat("too many header fields (at most ", o.max_headers, ")")));
  const std::string target(req.target());
  if (target.size() > kMaxTarget) return fail(ApiError(414, cat("the request target is longer than ", kMaxTarget, " bytes")));
  if (target.empty() || target[0] != '/')
    return fail(ApiError(400, cat("the request target must be a path starting with '/' (got '", printable(target), "')")));
  const std::string path = target.substr(0, target.find('?'));

  const beast::string_view host = req[http::field::host];
  if (host.empty() && req.version() >= 11) return fail(ApiError(400, "an HTTP/1.1 request needs a Host header"));
  if (st_.loopback && !host.empty() && !loopback_host_allowed(sv(host), o.allowed_hosts))
    return fail(ApiError(403, cat("Host '", printable(sv(host)), "' is not accepted by a server on a loopback address "
                                  "(DNS rebinding); add it with --allowed-hosts"), "", "host_not_allowed"));
  const beast::string_view origin = req[http::field::origin];
  if (!origin.empty()) {
    if (!origin_allowed(sv(origin), sv(host), o.allowed_origins))
      return fail(ApiError(403, cat("requests from the origin '", printable(sv(origin)), "' are not allowed (see --allowed-origins)"),
                           "", "origin_not_allowed"));
    cors_origin_ = std::string(origin);
  }
  if (req.find(http::field::transfer_encoding) != req.end() && !parser_->chunked())
    return fail(ApiError(400, "only the chunked Transfer-Encoding is accepted"));

  const std::string method(req.method_string());
  if (req.method() == http::verb::options) {  // a CORS preflight, or a client asking what is allowed
    preflight_ = true;
    const Route* any = st_.route_of(path, "");
    if (any) route_name_ = any->pattern;
    Reply r;
    r.status = 204;
    r.content_type.clear();
    st_.ctx.http.count(route_name_, r.status);
    return write_complete(std::move(r), !parser_->is_done() || !keep_alive());
  }
  route_ = st_.route_of(path, method, &capture_);
  // Refusals before the body is read keep the connection only when there is no body left to skip.
  const bool keep = parser_->is_done();
  if (!route_) {
    if (const Route* any = st_.route_of(path, "")) {
      route_name_ = any->pattern;
      return fail(ApiError(405, cat("method ", printable(method), " is not allowed for ", printable(path))), keep);
    }
    return fail(ApiError(404, cat("unknown route: ", printable(method), " ", printable(path))), keep);
  }
  route_name_ = route_->pattern;
  if (route_->needs_key && !o.api_key.empty() && !bearer_matches(sv(req[http::field::authorization]), o.api_key))
    return fail(ApiError(401, "invalid or missing API key (send \"Authorization: Bearer KEY\")", "", "invalid_api_key"),
                keep);
  if (route_->needs_key && st_.ctx.draining)
    return fail(ApiError(503, "the server is shutting down", "", "shutting_down"), keep);
  if (parser_->is_done()) return dispatch();
  // A chunked body's size is unknown: room for the largest allowed (address space, not memory, until
  // written) spares the copies of a growing string, whose old buffers would double the peak.
  if (parser_->chunked()) parser_->get().body().reserve(std::min<size_t>(o.max_body_bytes, size_t(64) << 20));

  if (beast::iequals(req[http::field::expect], "100-continue")) {
    auto cont = std::make_shared<std::string>("HTTP/1.1 100 Continue\r\n\r\n");
    return asio::async_write(sock_, asio::buffer(*cont), [self = shared_from_this(), cont](beast::error_code e, size_t) {
      if (self->closed_) return;
      if (e) return self->close_now();
      self->read_body();
    });
  }
  read_body();
}

void Session::read_body() {
  phase_ = Phase::Body;
  arm(st_.opt.body_timeout_s);
  http::async_read(sock_, buf_, *parser_, [self = shared_from_this()](beast::error_code ec, size_t) { self->on_body(ec); });
}

void Session::on_body(beast::error_code ec) {
  if (closed_) return;
  if (ec && timed_out_)
    return fail(ApiError(408, cat("the request body did not arrive within ", st_.opt.body_timeout_s,
                                  " s (see --body-timeout)")));
  if (ec == http::error::body_limit) return fail(ApiError(413, body_too_large(st_.opt)));
  if (ec && hung_up(ec)) return close_now();
  if (ec) return fail(transport_error(ec, st_.opt));
  dispatch();
}

// ---- running the route ----------------------------------------------------------------------------

void Session::dispatch() {
  disarm();
  phase_ = Phase::Handling;
  auto run = [self = shared_from_this(), route = route_,
              a = ApiRequest{std::move(parser_->get().body()), capture_}]() mutable {
    Reply r = call_route(*route, self->st_.ctx, a);
    asio::post(self->sock_.get_executor(), [self, r = std::move(r)]() mutable { self->reply(std::move(r)); });
  };
  parser_.reset();  // the body was moved out; the head is not needed any more
  if (std::string_view(route_->method) == "GET") return run();
  watch_peer();
  asio::post(st_.workers, std::move(run));
}

void Session::reply(Reply r) {
  if (closed_) {
    if (r.stream) r.stream->cancel();
    return;
  }
  phase_ = Phase::Replying;
  sse_ = r.stream && is_sse(r.content_type);
  if (!r.stream || sse_) st_.ctx.http.count(route_name_, r.status);  // a collected body: once it is complete
  if (!r.stream) {
    stop_watch();
    return write_complete(std::move(r), !keep_alive());
  }
  stream_ = std::move(r.stream);
  reply_status_ = r.status;
  reply_type_ = r.content_type;
  doc_.clear();
  st_.ctx.http.stream_started();
  stream_counted_ = true;
  watch_peer();
  if (sse_) return stream_head();
  pull();  // a document ready when generation ends: collected, then sent whole
}

void Session::write_complete(Reply r, bool close) {
  auto res = std::make_shared<http::response<http::string_body>>();
  res->version(11);
  res->result(unsigned(r.status));
  if (!r.content_type.empty()) res->set(http::field::content_type, r.content_type);
  res->body() = std::move(r.body);
  add_headers(*res, r.status, close);
  if (r.status != 204) res->prepare_payload();  // a 204 has no body and no Content-Length
  arm(st_.opt.body_timeout_s);
  http::async_write(sock_, *res, [self = shared_from_this(), res, close](beast::error_code ec, size_t) {
    self->on_written(ec, close);
  });
}

void Session::on_written(beast::error_code ec, bool close) {
  disarm();
  if (closed_) return;
  if (ec) return close_now();
  if (close) return linger_close();
  read_next();
}

void Session::fail(const ApiError& e, bool keep) {
  disarm();
  stop_watch();
  phase_ = Phase::Replying;
  st_.ctx.http.count(route_name_, e.status);
  write_complete(Reply::json(error_json(e), e.status), !keep || !keep_alive());
}

// ---- streamed bodies ------------------------------------------------------------------------------

void Session::stream_head() {
  struct Head {
    http::response<http::empty_body> res;
    http::response_serializer<http::empty_body> sr{res};
  };
  auto h = std::make_shared<Head>();
  h->res.version(11);
  h->res.result(unsigned(reply_status_));
  h->res.set(http::field::content_type, reply_type_);
  h->res.set(http::field::cache_control, "no-cache");
  add_headers(h->res, reply_status_, !keep_alive());
  h->res.chunked(true);
  arm(st_.opt.body_timeout_s);
  http::async_write_header(sock_, h->sr, [self = shared_from_this(), h](beast::error_code ec, size_t) {
    self->disarm();
    if (self->closed_) return;
    if (ec) return self->close_now();
    self->pull();
  });
}

void Session::pull() {
  if (closed_) return;
  std::string out;
  bool more = false;
  try {
    more = stream_->next(out, milliseconds(0));
  } catch (const std::exception& e) {  // a broken stream ends its body; the connection closes
    std::fprintf(stderr, "dsv4 serve: a reply stream failed: %s\n", e.what());
    requested_close_ = true;
  }
  if (!out.empty()) backoff_ = kPollFirst;
  if (sse_ && (!out.empty() || !more)) return write_chunk(std::move(out), !more);
  if (!sse_) {
    doc_ += out;
    if (!more) {
      Reply r;
      r.status = stream_->final_status() ? stream_->final_status() : reply_status_;
      r.content_type = reply_type_;
      r.body = std::move(doc_);
      st_.ctx.http.count(route_name_, r.status);
      end_stream();
      stop_watch();
      return write_complete(std::move(r), !keep_alive());
    }
  }
  poll_.expires_after(backoff_);
  backoff_ = std::min(backoff_ * 2, kPollMax);
  poll_.async_wait([self = shared_from_this()](beast::error_code ec) {
    if (!ec) self->pull();
  });
}

void Session::write_chunk(std::string data, bool last) {
  auto frame = std::make_shared<std::string>();
  if (!data.empty()) {
    char size[24];
    std::snprintf(size, sizeof size, "%zx\r\n", data.size());
    *frame = size + data + "\r\n";
  }
  if (last) *frame += "0\r\n\r\n";
  arm(st_.opt.body_timeout_s);
  asio::async_write(sock_, asio::buffer(*frame), [self = shared_from_this(), frame, last](beast::error_code ec, size_t) {
    self->disarm();
    if (self->closed_) return;
    if (ec) return self->close_now();  // a write that stalled past --body-timeout, or the client left
    if (!last) return self->pull();
    self->stop_watch();
    if (self->keep_alive()) return self->read_next();
    self->linger_close();
  });
  // The stream is over for /metrics once its last bytes are handed to the socket (Asio writes them at
  // once when the socket has room): a client that read them may ask /metrics right away.
  if (last) end_stream();
}

void Session::end_stream() {
  if (stream_) stream_->cancel();  // finished: releases the request in the engine, if it still holds it
  stream_.reset();
  if (stream_counted_) st_.ctx.http.stream_ended();
  stream_counted_ = false;
}

// A readable socket while a reply is being prepared means the client closed it, sent its next request
// early (left for later), or nothing at all: the reactor is edge-triggered and may report readiness for
// bytes the request's own read already took (a stale edge), so the watch goes on. Closing on "nothing
// available" instead dropped a request now and then, unanswered (seen under ASan's slower timing).
void Session::watch_peer() {
  if (watching_) return;
  watching_ = true;
  const uint64_t epoch = ++watch_epoch_;
  sock_.async_wait(tcp::socket::wait_read, [self = shared_from_this(), epoch](beast::error_code ec) {
    if (epoch != self->watch_epoch_ || self->closed_) return;
    self->watching_ = false;
    if (ec) return;
    switch (peer_state(self->sock_.native_handle())) {
      case PeerState::Gone: return self->close_now();
      case PeerState::Waiting: return self->watch_peer();
      case PeerState::HasData: return;
    }
  });
}

// Only called while no write is pending: cancel() then stops the watch alone.
void Session::stop_watch() {
  if (!watching_) return;
  watching_ = false;
  ++watch_epoch_;
  beast::error_code ignored;
  sock_.cancel(ignored);
}

// ---- closing --------------------------------------------------------------------------------------

void Session::linger_close() {
  if (closed_) return;
  phase_ = Phase::Closing;
  beast::error_code ignored;
  sock_.shutdown(tcp::socket::shutdown_send, ignored);
  arm(kLingerSeconds);  // its expiry cancels the read: closed then
  discard_.resize(16384);
  linger_more();
}

void Session::linger_more() {
  sock_.async_read_some(asio::buffer(discard_), [self = shared_from_this()](beast::error_code ec, size_t) {
    if (self->closed_) return;
    if (ec) return self->close_now();
    self->linger_more();
  });
}

void Session::close_now() {
  if (closed_) return;
  closed_ = true;
  phase_ = Phase::Closing;
  ++arm_epoch_;
  beast::error_code ignored;
  deadline_.cancel();
  poll_.cancel();
  end_stream();
  sock_.shutdown(tcp::socket::shutdown_both, ignored);
  sock_.close(ignored);
}

}  // namespace dsv4::server::http_detail
