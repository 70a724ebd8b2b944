#include "server/http_server.h"

#include <httplib.h>

#include <cerrno>
#include <cstring>
#include <regex>

#include "core/error.h"
#include "server/api_error.h"
#include "server/routes.h"

namespace dsv4::server {

struct HttpServer::Impl {
  ServerContext& ctx;
  HttpOptions opt;
  httplib::Server svr;
  std::vector<std::pair<const Route*, std::regex>> table;

  // The route a request path falls under (any method), or nullptr.
  const Route* route_of(const std::string& path, const std::string& method = "") const {
    for (const auto& [r, re] : table)
      if ((method.empty() || method == r->method) && std::regex_match(path, re)) return r;
    return nullptr;
  }
};

namespace {

void send_error(httplib::Response& res, const ApiError& e) {
  res.status = e.status;
  res.set_content(dump_json(error_json(e)), "application/json");
}

// Writes a reply; a streamed body is pulled from the ReplyStream until it ends or the client leaves.
void send(ServerContext& ctx, Reply r, httplib::Response& res) {
  res.status = r.status;
  if (!r.stream) {
    res.set_content(r.body, r.content_type);
    return;
  }
  if (r.content_type == "text/event-stream") res.set_header("Cache-Control", "no-cache");
  ctx.http.stream_started();
  std::shared_ptr<ReplyStream> stream = r.stream;
  res.set_chunked_content_provider(
      r.content_type,
      [stream](size_t, httplib::DataSink& sink) {
        if (!sink.is_writable()) return false;  // closed by the client: cancel
        std::string out;
        const bool more = stream->next(out, std::chrono::milliseconds(50));
        if (!out.empty() && !sink.write(out.data(), out.size())) return false;
        if (!more) sink.done();
        return true;
      },
      [stream, &ctx](bool) {
        stream->cancel();
        ctx.http.stream_ended();
      });
}

}  // namespace

HttpServer::HttpServer(ServerContext& ctx, HttpOptions opt) : impl_(new Impl{ctx, std::move(opt), {}, {}}) {
  Impl& m = *impl_;
  for (const Route& r : routes()) m.table.emplace_back(&r, std::regex(r.pattern));
  httplib::Server& s = m.svr;
  const int threads = std::max(1, m.opt.threads);
  s.new_task_queue = [threads] { return new httplib::ThreadPool(size_t(threads)); };
  s.set_keep_alive_max_count(1000);
  s.set_keep_alive_timeout(3);
  s.set_read_timeout(30);
  s.set_write_timeout(30);
  s.set_payload_max_length(m.opt.max_body_bytes);
  s.set_tcp_nodelay(true);  // each SSE chunk goes out at once
  // SO_REUSEADDR only: httplib's default, SO_REUSEPORT, lets a second server bind a port in use.
  s.set_socket_options([](socket_t sock) {
    int yes = 1;
    setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
  });

  s.set_pre_routing_handler([&m](const httplib::Request& req, httplib::Response& res) {
    const Route* r = m.route_of(req.path);
    if (r && r->needs_key && !m.opt.api_key.empty() &&
        req.get_header_value("Authorization") != "Bearer " + m.opt.api_key) {
      send_error(res, ApiError(401, "invalid or missing API key (send \"Authorization: Bearer KEY\")", "",
                               "invalid_api_key"));
      return httplib::Server::HandlerResponse::Handled;
    }
    if (m.ctx.draining && r && r->needs_key) {
      send_error(res, ApiError(503, "the server is shutting down", "", "shutting_down"));
      return httplib::Server::HandlerResponse::Handled;
    }
    return httplib::Server::HandlerResponse::Unhandled;
  });

  for (const Route& route : routes()) {
    auto handler = [&m, &route](const httplib::Request& req, httplib::Response& res) {
      ApiRequest a{req.body, req.matches.size() > 1 ? req.matches[1].str() : std::string()};
      Reply r;
      try {
        r = route.handler(m.ctx, a);
      } catch (...) {
        ApiError e = to_api_error(std::current_exception());
        r = Reply::json(error_json(e), e.status);
      }
      send(m.ctx, std::move(r), res);
    };
    if (std::string(route.method) == "GET")
      s.Get(route.pattern, handler);
    else
      s.Post(route.pattern, handler);
  }

  // Errors without a body (no route, wrong method, malformed HTTP, too large) get OpenAI's shape too.
  s.set_error_handler(httplib::Server::HandlerWithResponse([&m](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty()) return httplib::Server::HandlerResponse::Unhandled;
    if (res.status == 404 && m.route_of(req.path))
      send_error(res, ApiError(405, cat("method ", req.method, " is not allowed for ", req.path)));
    else if (res.status == 404)
      send_error(res, ApiError(404, cat("unknown route: ", req.method, " ", req.path)));
    else if (res.status == 413)
      send_error(res, ApiError(413, cat("the request body is too large (at most ", m.opt.max_body_bytes,
                                        " bytes; form-encoded bodies at most 8192: send Content-Type: "
                                        "application/json)")));
    else
      send_error(res, ApiError(res.status, cat("HTTP error ", res.status)));
    return httplib::Server::HandlerResponse::Handled;
  }));
  s.set_exception_handler([](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
    send_error(res, to_api_error(ep));
  });
  // Counted before the response is written (httplib calls the logger only after the last byte is
  // sent, so a client could read /metrics before its previous request was counted).
  s.set_post_routing_handler([&m](const httplib::Request& req, httplib::Response& res) {
    const Route* r = m.route_of(req.path, req.method);
    m.ctx.http.count(r ? r->pattern : "unmatched", res.status);
  });
}

HttpServer::~HttpServer() = default;

int HttpServer::bind() {
  Impl& m = *impl_;
  int port = m.opt.port;
  if (port == 0)
    port = m.svr.bind_to_any_port(m.opt.host);
  else if (!m.svr.bind_to_port(m.opt.host, port))
    port = -1;
  if (port <= 0) fail("cannot listen on ", m.opt.host, ":", m.opt.port, " (", std::strerror(errno), ")");
  return port;
}

void HttpServer::run() { impl_->svr.listen_after_bind(); }

void HttpServer::stop() { impl_->svr.stop(); }

}  // namespace dsv4::server
