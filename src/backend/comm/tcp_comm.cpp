#include "backend/comm/tcp_comm.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

#include <algorithm>
#include <boost/asio.hpp>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <thread>

namespace dsv4::comm {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;
using Clock = std::chrono::steady_clock;

namespace {

// ---- Environment.

int64_t env_int(const std::function<const char*(const char*)>& env, const char* name, int64_t lo, int64_t hi,
                const char* meaning) {
  const char* v = env(name);
  if (!v || !*v) fail(name, " is not set (expected ", meaning, ")");
  errno = 0;
  char* end = nullptr;
  const long long x = std::strtoll(v, &end, 10);
  if (errno || *end || end == v || x < lo || x > hi)
    fail(name, ": expected ", meaning, " (", lo, " to ", hi, "), got '", v, "'");
  return x;
}

// ---- Blocking operations with a deadline over one io_context.

// The deadline of a wait without a time limit (Wait::Unbounded).
constexpr Clock::time_point kNoDeadline = Clock::time_point::max();

class Io {
 public:
  // Runs the asynchronous operation `start(handler)` until it completes or `deadline` passes; on
  // timeout calls cancel(), drains the cancelled operation and returns std::nullopt.
  template <typename Start, typename Cancel>
  std::optional<boost::system::error_code> wait(Start&& start, Cancel&& cancel, Clock::time_point deadline) {
    std::optional<boost::system::error_code> result;
    start([&](const boost::system::error_code& ec, auto&&...) { result = ec; });
    io_.restart();
    while (!result && Clock::now() < deadline) {
      if (deadline == kNoDeadline)
        io_.run_one();
      else
        io_.run_one_until(deadline);
    }
    if (!result) {
      cancel();
      io_.restart();
      io_.run();  // the cancelled handler runs (operation_aborted)
      return std::nullopt;
    }
    return result;
  }
  asio::io_context& context() { return io_; }

 private:
  asio::io_context io_;
};

std::string endpoint_str(const Rendezvous& r) { return cat(r.master_addr, ":", r.master_port); }

tcp::endpoint resolve(Io& io, const Rendezvous& r) {
  tcp::resolver res(io.context());
  boost::system::error_code ec;
  auto it = res.resolve(r.master_addr, std::to_string(r.master_port), ec);
  if (ec || it.empty())
    fail("rendezvous: MASTER_ADDR '", r.master_addr, "' does not resolve (", ec ? ec.message() : "no address", ")");
  return *it.begin();
}

// TCP keepalive on a connection of the group: when a peer's host vanishes (no FIN ever comes), the
// reads fail after about 4 x `timeout` of silence, so a wait without a time limit still ends. Best
// effort: a socket that refuses an option keeps the kernel's defaults.
void keep_alive(tcp::socket& s, std::chrono::milliseconds timeout) {
  const int on = 1, probes = 3, secs = int(std::clamp<int64_t>(timeout.count() / 1000, 1, 32767));  // Linux's limit
  const int fd = s.native_handle();
  ::setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &on, sizeof on);
  ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &secs, sizeof secs);
  ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &secs, sizeof secs);
  ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &probes, sizeof probes);
}

constexpr uint32_t kMagic = 0x34565344;  // "DSV4"
constexpr uint32_t kVersion = 1;

struct Hello {
  uint32_t magic = kMagic, version = kVersion;
  int32_t rank = 0, world_size = 0;
};

// One framed connection: u64 length, then the bytes.
class Peer {
 public:
  Peer(Io& io, tcp::socket s, std::string who) : io_(io), s_(std::move(s)), who_(std::move(who)) {}

  void send(std::span<const std::byte> bytes, Clock::time_point deadline, const std::string& what) {
    const uint64_t n = bytes.size();
    std::array<asio::const_buffer, 2> bufs{asio::buffer(&n, sizeof n), asio::buffer(bytes.data(), bytes.size())};
    finish(io_.wait([&](auto h) { asio::async_write(s_, bufs, h); }, [&] { s_.cancel(); }, deadline), what, "sending");
  }

  std::vector<std::byte> receive(Clock::time_point deadline, const std::string& what) {
    uint64_t n = 0;
    finish(io_.wait([&](auto h) { asio::async_read(s_, asio::buffer(&n, sizeof n), h); }, [&] { s_.cancel(); }, deadline),
           what, "waiting");
    if (n > (uint64_t(1) << 40)) fail("tcp comm: ", who_, " sent a message of ", n, " bytes (a stray connection?)");
    std::vector<std::byte> b(static_cast<size_t>(n));
    finish(io_.wait([&](auto h) { asio::async_read(s_, asio::buffer(b.data(), b.size()), h); }, [&] { s_.cancel(); },
                    deadline),
           what, "waiting");
    return b;
  }

  void rename(std::string who) { who_ = std::move(who); }

  // Ends the connection: the peer's pending and later reads fail at once (it learns that this rank left).
  void close() {
    boost::system::error_code ec;
    s_.shutdown(tcp::socket::shutdown_both, ec);
    s_.close(ec);
  }

  template <typename T>
  void send_pod(const T& v, Clock::time_point deadline, const std::string& what) {
    send(std::as_bytes(std::span<const T>(&v, 1)), deadline, what);
  }
  template <typename T>
  T receive_pod(Clock::time_point deadline, const std::string& what) {
    const std::vector<std::byte> b = receive(deadline, what);
    if (b.size() != sizeof(T)) fail("tcp comm: ", who_, " sent ", b.size(), " bytes for ", what, ", expected ", sizeof(T));
    T v;
    std::memcpy(&v, b.data(), sizeof(T));
    return v;
  }

 private:
  void finish(const std::optional<boost::system::error_code>& r, const std::string& what, const char* doing) {
    if (!r) fail("tcp comm: timed out ", doing, " for ", who_, " (", what, ")");
    if (*r) fail("tcp comm: lost the connection to ", who_, " (", what, "): ", r->message());
  }

  Io& io_;
  tcp::socket s_;
  std::string who_;
};

// Replies of rank 0: a status byte (0 ok, 1 error) then the result or the error text.
std::vector<std::byte> reply(bool ok, std::span<const std::byte> body) {
  std::vector<std::byte> out(1 + body.size());  // sized once: GCC 12 misreads push_back + insert of an empty range
  out[0] = std::byte(ok ? 0 : 1);
  if (!body.empty()) std::memcpy(out.data() + 1, body.data(), body.size());
  return out;
}
std::span<const std::byte> text_bytes(const std::string& s) { return std::as_bytes(std::span(s.data(), s.size())); }

class TcpComm final : public HostCommunicator {
 public:
  explicit TcpComm(const Rendezvous& r) : r_(r) {
    if (r.world_size == 1) return;  // a group of one needs no connection
    if (r.rank == 0)
      listen_and_accept();
    else
      connect_to_root();
  }
  int rank() const override { return r_.rank; }
  int size() const override { return r_.world_size; }

 protected:
  std::vector<std::byte> exchange(const Contribution& mine, Wait wait) override {
    const auto deadline = wait == Wait::Unbounded ? kNoDeadline : Clock::now() + r_.timeout;
    const std::string what = op_name(mine.op);
    if (!broken_.empty()) fail(broken_);
    try {
      if (r_.rank != 0) {
        peers_[0]->send(encode(mine), deadline, what);
        const std::vector<std::byte> b = peers_[0]->receive(deadline, what);
        if (b.empty()) fail("tcp comm: rank 0 sent an empty reply to ", what);
        if (b[0] != std::byte(0)) fail(std::string(reinterpret_cast<const char*>(b.data() + 1), b.size() - 1));
        return std::vector<std::byte>(b.begin() + 1, b.end());
      }
      std::vector<std::vector<std::byte>> raw(size_t(r_.world_size));
      std::vector<Contribution> all(size_t(r_.world_size));
      all[0] = mine;
      for (int q = 1; q < r_.world_size; ++q) {
        raw[size_t(q)] = peers_[size_t(q)]->receive(deadline, what);
        try {
          all[size_t(q)] = decode(raw[size_t(q)]);
        } catch (const Error& e) {
          fail("tcp comm: rank ", q, " sent a malformed ", what, " message: ", e.what());
        }
      }
      std::string error;
      try {
        std::vector<std::byte> out = collective_output(all, 0);
        for (int q = 1; q < r_.world_size; ++q)
          peers_[size_t(q)]->send(reply(true, collective_output(all, q)), deadline, what);
        return out;
      } catch (const Error& e) {
        error = e.what();
      }
      for (int q = 1; q < r_.world_size; ++q) peers_[size_t(q)]->send(reply(false, text_bytes(error)), deadline, what);
      fail(error);
    } catch (const Error& e) {
      // A transport failure leaves the streams out of step: no later collective can be trusted. Closing
      // every connection tells the peers at once (one may wait without a limit for this rank's next call).
      if (std::string(e.what()).rfind("tcp comm:", 0) == 0) {
        broken_ = cat(e.what(), "; the group is unusable");
        for (const std::unique_ptr<Peer>& p : peers_)
          if (p) p->close();
      }
      throw;
    }
  }

 private:
  void listen_and_accept() {
    const auto deadline = Clock::now() + r_.timeout;
    const tcp::endpoint ep = resolve(io_, r_);
    tcp::acceptor acc(io_.context());
    boost::system::error_code ec;
    acc.open(ep.protocol(), ec);
    if (!ec) acc.set_option(tcp::acceptor::reuse_address(true), ec);
    if (!ec) acc.bind(ep, ec);
    if (!ec) acc.listen(asio::socket_base::max_listen_connections, ec);
    if (ec)
      fail("rendezvous: rank 0 cannot listen on MASTER_ADDR:MASTER_PORT = ", endpoint_str(r_), ": ", ec.message());
    peers_.resize(size_t(r_.world_size));
    for (int joined = 1; joined < r_.world_size;) {
      tcp::socket s(io_.context());
      const auto got = io_.wait([&](auto h) { acc.async_accept(s, h); }, [&] { acc.cancel(); }, deadline);
      if (!got) {
        std::string missing;
        for (int q = 1; q < r_.world_size; ++q)
          if (!peers_[size_t(q)]) missing += (missing.empty() ? "" : ", ") + std::to_string(q);
        fail("rendezvous: rank 0 waited ", r_.timeout.count() / 1000.0, " s on MASTER_ADDR:MASTER_PORT = ",
             endpoint_str(r_), " for rank(s) ", missing, " of WORLD_SIZE=", r_.world_size);
      }
      if (*got) fail("rendezvous: rank 0 could not accept a connection on ", endpoint_str(r_), ": ", got->message());
      keep_alive(s, r_.timeout);
      auto peer = std::make_unique<Peer>(io_, std::move(s), "a connecting peer");
      const Hello h = peer->receive_pod<Hello>(deadline, "rendezvous");
      std::string refuse;
      if (h.magic != kMagic || h.version != kVersion)
        refuse = cat("a connection to ", endpoint_str(r_), " that is not a dsv4 rank of this version");
      else if (h.world_size != r_.world_size)
        refuse = cat("rank ", h.rank, " has WORLD_SIZE=", h.world_size, ", rank 0 has WORLD_SIZE=", r_.world_size);
      else if (h.rank < 1 || h.rank >= r_.world_size)
        refuse = cat("a peer says RANK=", h.rank, ", expected 1 to ", r_.world_size - 1);
      else if (peers_[size_t(h.rank)])
        refuse = cat("two processes say RANK=", h.rank);
      if (!refuse.empty()) {
        try {
          peer->send(reply(false, text_bytes("rendezvous: " + refuse)), deadline, "rendezvous");
        } catch (const Error&) {
        }
        fail("rendezvous: ", refuse);
      }
      peer->rename(cat("rank ", h.rank));
      peers_[size_t(h.rank)] = std::move(peer);
      ++joined;
    }
    for (int q = 1; q < r_.world_size; ++q) peers_[size_t(q)]->send(reply(true, {}), deadline, "rendezvous");
  }

  void connect_to_root() {
    const auto deadline = Clock::now() + r_.timeout;
    std::string last = "no attempt";
    for (;;) {
      const tcp::endpoint ep = resolve(io_, r_);
      tcp::socket s(io_.context());
      const auto got = io_.wait([&](auto h) { s.async_connect(ep, h); }, [&] { s.close(); }, deadline);
      if (got && !*got) {
        keep_alive(s, r_.timeout);
        peers_.push_back(std::make_unique<Peer>(io_, std::move(s), "rank 0"));
        break;
      }
      if (got) last = got->message();
      if (Clock::now() + std::chrono::milliseconds(100) >= deadline)
        fail("rendezvous: rank ", r_.rank, " could not reach rank 0 at MASTER_ADDR:MASTER_PORT = ", endpoint_str(r_),
             " within ", r_.timeout.count() / 1000.0, " s (", last, ")");
      std::this_thread::sleep_for(std::chrono::milliseconds(100));  // rank 0 may not listen yet
    }
    Peer& root = *peers_[0];
    root.send_pod(Hello{.rank = r_.rank, .world_size = r_.world_size}, deadline, "rendezvous");
    const std::vector<std::byte> b = root.receive(deadline, "rendezvous");
    if (b.empty() || b[0] != std::byte(0))
      fail(b.size() > 1 ? std::string(reinterpret_cast<const char*>(b.data() + 1), b.size() - 1)
                        : std::string("rendezvous: rank 0 refused the connection"));
  }

  Rendezvous r_;
  Io io_;
  std::vector<std::unique_ptr<Peer>> peers_;  // rank 0: [world] (slot 0 empty); others: {rank 0}
  std::string broken_;
};

}  // namespace

Rendezvous rendezvous_from_env(const std::function<const char*(const char*)>& env) {
  Rendezvous r;
  const char* addr = env("MASTER_ADDR");
  if (!addr || !*addr) fail("MASTER_ADDR is not set (expected the host name or address of rank 0, e.g. 127.0.0.1)");
  r.master_addr = addr;
  r.master_port = int(env_int(env, "MASTER_PORT", 1, 65535, "the TCP port rank 0 listens on"));
  r.world_size = int(env_int(env, "WORLD_SIZE", 1, 65536, "the number of processes"));
  r.rank = int(env_int(env, "RANK", 0, r.world_size - 1, "this process's rank, below WORLD_SIZE"));
  r.local_rank = int(env_int(env, "LOCAL_RANK", 0, r.world_size - 1, "this process's index on its host"));
  if (const char* t = env("DSV4_COMM_TIMEOUT"); t && *t)
    r.timeout = std::chrono::seconds(env_int(env, "DSV4_COMM_TIMEOUT", 1, 86400, "seconds to wait for peers"));
  return r;
}

Rendezvous rendezvous_from_env() {
  return rendezvous_from_env([](const char* name) -> const char* { return std::getenv(name); });
}

std::unique_ptr<HostCommunicator> connect_tcp(const Rendezvous& r) {
  if (r.world_size < 1) fail("rendezvous: WORLD_SIZE must be at least 1, got ", r.world_size);
  if (r.rank < 0 || r.rank >= r.world_size) fail("rendezvous: RANK=", r.rank, " is outside 0..", r.world_size - 1);
  if (r.timeout.count() <= 0) fail("rendezvous: the timeout must be positive");
  return std::make_unique<TcpComm>(r);
}

}  // namespace dsv4::comm
