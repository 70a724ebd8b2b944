#include "server/http_server.h"

#include <sys/resource.h>

#include <cstdio>
#include <thread>

#include "core/error.h"
#include "server/http_server_policy.h"
#include "server/http_server_session.h"

namespace dsv4::server {

using namespace http_detail;

namespace http_detail {

ServerState::ServerState(ServerContext& c, HttpOptions o)
    : ctx(c), opt(std::move(o)), workers(size_t(std::max(1, opt.workers))) {
  for (const Route& r : routes()) table.emplace_back(&r, std::regex(r.pattern));
}

const Route* ServerState::route_of(const std::string& path, const std::string& method, std::string* capture) const {
  std::smatch m;
  for (const auto& [r, re] : table) {
    if ((!method.empty() && method != r->method) || !std::regex_match(path, m, re)) continue;
    if (capture && m.size() > 1) *capture = m[1].str();
    return r;
  }
  return nullptr;
}

uint64_t ServerState::add(const std::shared_ptr<Session>& s) {
  std::lock_guard<std::mutex> lk(mu);
  sessions[++next_id] = s;
  return next_id;
}

void ServerState::remove(uint64_t id) {
  std::lock_guard<std::mutex> lk(mu);
  sessions.erase(id);
}

std::vector<std::shared_ptr<Session>> ServerState::live() {
  std::lock_guard<std::mutex> lk(mu);
  std::vector<std::shared_ptr<Session>> out;
  for (auto& [id, w] : sessions)
    if (auto s = w.lock()) out.push_back(std::move(s));
  return out;
}

}  // namespace http_detail

// Destroyed in reverse: the I/O objects first, the state (which sessions reach) last.
struct HttpServer::Impl {
  Impl(ServerContext& c, HttpOptions o)
      : st(c, std::move(o)), ioc(std::max(1, st.opt.io_threads)), acceptor(ioc), retry(ioc) {}

  ServerState st;
  asio::io_context ioc;
  asio::executor_work_guard<asio::io_context::executor_type> guard = asio::make_work_guard(ioc);
  tcp::acceptor acceptor;
  asio::steady_timer retry;  // accept() again after running out of file descriptors
  std::vector<std::thread> threads;
  std::mutex stop_mu;
  bool stopped = false;

  void accept() {
    acceptor.async_accept(asio::make_strand(ioc), [this](beast::error_code ec, tcp::socket sock) {
      if (!acceptor.is_open()) return;
      if (ec) {  // EMFILE and the like: the connections being served go on; accept again shortly
        retry.expires_after(std::chrono::milliseconds(50));
        retry.async_wait([this](beast::error_code e) {
          if (!e) accept();
        });
        return;
      }
      beast::error_code ignored;
      sock.set_option(tcp::no_delay(true), ignored);  // each SSE chunk goes out at once
      const bool over = st.connections.load() >= st.opt.max_connections;
      auto s = std::make_shared<Session>(st, std::move(sock), !over);
      if (over)
        s->start_rejected();
      else
        s->start();
      accept();
    });
  }
};

HttpServer::HttpServer(ServerContext& ctx, HttpOptions opt) : impl_(new Impl(ctx, std::move(opt))) {}

HttpServer::~HttpServer() { stop(); }

int HttpServer::bind() {
  Impl& m = *impl_;
  HttpOptions& o = m.st.opt;
  beast::error_code ec;
  tcp::resolver resolver(m.ioc);
  const auto found = resolver.resolve(o.host, std::to_string(o.port), asio::ip::resolver_base::passive, ec);
  if (!ec && found.empty()) ec = asio::error::host_not_found;
  tcp::endpoint ep;
  if (!ec) {
    ep = found.begin()->endpoint();
    m.acceptor.open(ep.protocol(), ec);
  }
  // SO_REUSEADDR (a restarted server binds at once), never SO_REUSEPORT (a second server must fail).
  if (!ec) m.acceptor.set_option(tcp::acceptor::reuse_address(true), ec);
  if (!ec) m.acceptor.bind(ep, ec);
  if (!ec) m.acceptor.listen(asio::socket_base::max_listen_connections, ec);
  if (ec) fail("cannot listen on ", o.host, ":", o.port, " (", ec.message(), ")");
  m.st.loopback = ep.address().is_loopback() || is_loopback_address(o.host);
  // Each connection is a file descriptor: stay below the process's limit, keeping some for the rest.
  rlimit rl{};
  if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur > 128 &&
      rlim_t(o.max_connections) > rl.rlim_cur - 64) {
    o.max_connections = int(rl.rlim_cur - 64);
    std::fprintf(stderr, "dsv4 serve: at most %d connections (the open-file limit is %llu)\n", o.max_connections,
                 (unsigned long long)rl.rlim_cur);
  }
  return m.acceptor.local_endpoint().port();
}

void HttpServer::run() {
  Impl& m = *impl_;
  asio::post(m.ioc, [&m] { m.accept(); });
  for (int i = 0; i < std::max(1, m.st.opt.io_threads); ++i)
    m.threads.emplace_back([&m] {
      for (;;) {
        try {
          m.ioc.run();
          return;
        } catch (const std::exception& e) {  // one connection's failure must not end the others
          std::fprintf(stderr, "dsv4 serve: HTTP error: %s\n", e.what());
        }
      }
    });
  for (auto& t : m.threads) t.join();
}

void HttpServer::drain() {
  Impl& m = *impl_;
  m.st.draining = true;
  for (auto& s : m.st.live()) s->drain();
}

void HttpServer::stop() {
  Impl& m = *impl_;
  {
    std::lock_guard<std::mutex> lk(m.stop_mu);
    if (m.stopped) return;
    m.stopped = true;
  }
  m.st.draining = true;
  asio::post(m.ioc, [&m] {
    beast::error_code ignored;
    m.acceptor.close(ignored);
    m.retry.cancel();
  });
  for (auto& s : m.st.live()) s->stop();
  // Closed sessions go away once their pending operations have completed; a handler still running on
  // a worker keeps its session until it returns (the engine has stopped by now, so it returns soon).
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(2);
  while (!m.st.live().empty() && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  m.st.workers.join();  // what is queued there runs (the engine refuses it now): no handler outlives the I/O
  m.guard.reset();
  m.ioc.stop();
}

}  // namespace dsv4::server
