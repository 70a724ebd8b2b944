// The HTTP front's limits and checks against the real `dsv4 serve` over loopback (raw sockets, so that
// the requests can be as broken as a hostile client makes them): body size for Content-Length and
// chunked bodies (memory stays bounded), header size and count, malformed Content-Length and paths,
// connection limit, head deadline, Host and Origin checks, the Bearer scheme; plus the checks
// themselves (http_server_policy.h) called directly.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <thread>

#include "server/http_client.h"
#include "server/http_server_policy.h"
#include "server/serve_process.h"

namespace dsv4::test {
namespace {

using Json = nlohmann::json;
using namespace std::chrono_literals;

// The serve process's resident memory in bytes (VmRSS of /proc/PID/status).
int64_t rss_bytes(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  for (std::string line; std::getline(in, line);)
    if (line.rfind("VmRSS:", 0) == 0) return std::atoll(line.c_str() + 6) * 1024;
  return -1;
}

// Sends `head` then the pieces `body(i)` gives (until it returns "" or a send fails) on another
// thread, while this one reads the answer; `peak_rss` gets the serve process's largest RSS meanwhile.
HttpReply send_while_reading(int port, const std::string& head, const std::function<std::string(int)>& body,
                             pid_t pid = 0, int64_t* peak_rss = nullptr) {
  const int fd = connect_loopback(port);
  if (fd < 0) return {};
  std::atomic<bool> done{false};
  std::thread sender([&] {
    if (send_all(fd, head))
      for (int i = 0; !done; ++i) {
        const std::string piece = body(i);
        if (piece.empty() || !send_all(fd, piece)) break;
      }
  });
  std::thread sampler([&] {
    while (peak_rss && !done) {
      *peak_rss = std::max(*peak_rss, rss_bytes(pid));
      std::this_thread::sleep_for(5ms);
    }
  });
  const HttpReply r = read_reply(fd, 60s);
  done = true;
  shutdown(fd, SHUT_RDWR);
  sender.join();
  sampler.join();
  close(fd);
  return r;
}

// A raw request and its answer (the connection is closed by the test after `limit`).
HttpReply raw_request(int port, const std::string& request, std::chrono::milliseconds limit = 10s) {
  const int fd = connect_loopback(port);
  if (fd < 0) return {};
  HttpReply r;
  if (send_all(fd, request)) r = read_reply(fd, limit);
  close(fd);
  return r;
}

std::string error_message(const HttpReply& r) {
  const Json j = Json::parse(r.body, nullptr, false);
  return j.is_object() && j.contains("error") ? j["error"].value("message", "") : "";
}

class HttpLimits : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { server_ = new ServeProcess({"--numerics", "reference", "--max-num-seqs", "2"}); }
  static void TearDownTestSuite() {
    EXPECT_EQ(server_->stop(), 0) << server_->log();
    delete server_;
  }
  static int port() { return server_->port(); }
  static ServeProcess* server_;
};
ServeProcess* HttpLimits::server_ = nullptr;

TEST_F(HttpLimits, ChunkedBodyOverTheLimitIs413WithBoundedMemory) {
  const int64_t before = rss_bytes(server_->pid());
  int64_t peak = before;
  const std::string mb(1 << 20, ' ');
  auto chunk = [&](int i) {  // 100 chunks of 1 MiB: 100 MiB, over the 16 MiB default limit
    if (i > 100) return std::string();
    if (i == 100) return std::string("0\r\n\r\n");
    return "100000\r\n" + mb + "\r\n";
  };
  const auto t0 = std::chrono::steady_clock::now();
  HttpReply r = send_while_reading(port(),
                                   "POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                                   "Transfer-Encoding: chunked\r\n\r\n",
                                   chunk, server_->pid(), &peak);
  EXPECT_EQ(r.status, 413) << r.body;
  EXPECT_NE(error_message(r).find("too large"), std::string::npos) << r.body;
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 30s);
  EXPECT_LT(peak - before, int64_t(64) << 20) << "RSS " << before << " -> peak " << peak;
  // The same size announced by Content-Length is refused before a byte of the body is read.
  HttpReply cl = raw_request(port(), "POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 104857600\r\n\r\n");
  EXPECT_EQ(cl.status, 413) << cl.body;
  EXPECT_EQ(http_request(port(), "GET", "/health").status, 200);
}

TEST_F(HttpLimits, MillionHeadersAre431AndMemoryComesBack) {
  const int64_t before = rss_bytes(server_->pid());
  const std::string lines = [] {
    std::string s;
    for (int i = 0; i < 10000; ++i) s += "X-Filler: abcdefgh\r\n";
    return s;
  }();
  HttpReply r = send_while_reading(port(), "GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n", [&](int i) {
    return i < 100 ? lines : std::string();  // 100 x 10,000 = 1,000,000 header lines
  });
  EXPECT_EQ(r.status, 431) << r.body;
  ASSERT_TRUE(Json::parse(r.body, nullptr, false).contains("error")) << r.body;
  std::this_thread::sleep_for(200ms);
  EXPECT_LT(rss_bytes(server_->pid()) - before, int64_t(64) << 20);
  // Few but too many fields: counted, not only measured.
  std::string many = "GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n";
  for (int i = 0; i < 200; ++i) many += "X-" + std::to_string(i) + ": 1\r\n";
  EXPECT_EQ(raw_request(port(), many + "\r\n").status, 431);
  EXPECT_EQ(http_request(port(), "GET", "/health").status, 200);
}

TEST_F(HttpLimits, MalformedContentLengthIs400AtOnce) {
  for (const char* cl : {"Content-Length: -5", "Content-Length: abc", "Content-Length: 5, 6",
                         "Content-Length: 5\r\nContent-Length: 6", "Content-Length: 99999999999999999999999",
                         "Content-Length: 5\r\nTransfer-Encoding: chunked"}) {
    SCOPED_TRACE(cl);
    const auto t0 = std::chrono::steady_clock::now();
    // Far less than the head deadline (10 s): the answer comes at once, not after a timeout.
    HttpReply r = raw_request(port(), std::string("POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n") + cl + "\r\n\r\n", 5s);
    EXPECT_EQ(r.status, 400) << r.body;
    EXPECT_FALSE(error_message(r).empty()) << r.body;
    EXPECT_LT(std::chrono::steady_clock::now() - t0, 5s);
  }
}

TEST_F(HttpLimits, GarbageInThePathIs400WithAReadableMessage) {
  for (std::string path : {std::string("/v1/mo\0dels", 11), std::string("/health\x01"), std::string("/a b/c"),
                           std::string("nopath")}) {
    SCOPED_TRACE(server::printable(path));
    HttpReply r = raw_request(port(), "GET " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n");
    EXPECT_EQ(r.status, 400) << r.body;
    const std::string m = error_message(r);
    EXPECT_FALSE(m.empty()) << r.body;
    EXPECT_EQ(m.find('\0'), std::string::npos);
  }
  HttpReply enc = raw_request(port(), "GET /v1/%00 HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n");
  EXPECT_EQ(enc.status, 404);
  EXPECT_NE(error_message(enc).find("/v1/%00"), std::string::npos) << enc.body;
  EXPECT_EQ(raw_request(port(), "GET /" + std::string(5000, 'a') + " HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n").status, 414);
}

TEST_F(HttpLimits, HostAndOriginChecksOnALoopbackServer) {
  auto with = [&](const Headers& h) { return http_request(port(), "GET", "/health", "", h); };
  for (const char* ok : {"localhost", "localhost:8000", "127.0.0.1:1", "127.9.8.7", "[::1]:8080", "LOCALHOST"})
    EXPECT_EQ(raw_request(port(), std::string("GET /health HTTP/1.1\r\nHost: ") + ok + "\r\n\r\n").status, 200) << ok;
  for (const char* bad : {"evil.example", "evil.example:8000", "127.0.0.1.evil.example", "128.0.0.1", "localhost.evil"}) {
    HttpReply r = raw_request(port(), std::string("GET /health HTTP/1.1\r\nHost: ") + bad + "\r\n\r\n");
    EXPECT_EQ(r.status, 403) << bad;
    EXPECT_NE(r.body.find("host_not_allowed"), std::string::npos) << r.body;
  }
  // No --allowed-origins: a page elsewhere is refused, and gets no CORS header; the server's own page is not.
  HttpReply evil = with({{"Origin", "http://evil.example"}});
  EXPECT_EQ(evil.status, 403);
  EXPECT_TRUE(evil.header("access-control-allow-origin").empty());
  EXPECT_EQ(http_request(port(), "POST", "/v1/completions", R"({"prompt": "A", "max_tokens": 1})",
                         {{"Origin", "http://evil.example"}, {"Content-Type", "text/plain"}})
                .status,
            403);
  EXPECT_EQ(with({{"Origin", "http://127.0.0.1"}}).status, 200);
}

TEST(HttpServe, CorsForAllowedOriginsOnly) {
  ServeProcess s({"--allowed-origins", "http://app.example:3000,https://b.example", "--allowed-hosts", "my.host"});
  HttpReply pre = http_request(s.port(), "OPTIONS", "/v1/chat/completions", "",
                               {{"Origin", "http://app.example:3000"}, {"Access-Control-Request-Method", "POST"},
                                {"Access-Control-Request-Headers", "authorization, content-type"}});
  EXPECT_EQ(pre.status, 204);
  EXPECT_EQ(pre.header("access-control-allow-origin"), "http://app.example:3000");
  EXPECT_NE(pre.header("access-control-allow-methods").find("POST"), std::string::npos);
  EXPECT_EQ(pre.header("access-control-allow-headers"), "authorization, content-type");
  HttpReply other = http_request(s.port(), "OPTIONS", "/v1/chat/completions", "", {{"Origin", "http://app.example"}});
  EXPECT_EQ(other.status, 403);
  EXPECT_TRUE(other.header("access-control-allow-origin").empty());
  HttpReply got = http_request(s.port(), "GET", "/v1/models", "", {{"Origin", "https://b.example"}});
  EXPECT_EQ(got.status, 200);
  EXPECT_EQ(got.header("access-control-allow-origin"), "https://b.example");
  EXPECT_TRUE(http_request(s.port(), "GET", "/v1/models").header("access-control-allow-origin").empty());
  EXPECT_EQ(raw_request(s.port(), "GET /health HTTP/1.1\r\nHost: my.host:8000\r\n\r\n").status, 200);
  EXPECT_EQ(raw_request(s.port(), "GET /health HTTP/1.1\r\nHost: other.host\r\n\r\n").status, 403);
  EXPECT_EQ(s.stop(), 0) << s.log();
}

TEST(HttpServe, BearerSchemeInAnyCase) {
  ServeProcess s({"--api-key", "sesame"});
  for (const char* good : {"Bearer sesame", "bearer sesame", "BEARER  sesame ", "bEaReR\tsesame"})
    EXPECT_EQ(http_request(s.port(), "GET", "/v1/models", "", {{"Authorization", good}}).status, 200) << good;
  for (const char* bad : {"Bearer sesam", "Bearer sesamee", "Basic sesame", "sesame", "Bearer", "Bearer SESAME"})
    EXPECT_EQ(http_request(s.port(), "GET", "/v1/models", "", {{"Authorization", bad}}).status, 401) << bad;
  EXPECT_EQ(s.stop(), 0) << s.log();
}

TEST(HttpServe, ConnectionsOverTheMaximumGet503) {
  ServeProcess s({"--max-connections", "4"});
  std::vector<int> held;
  for (int i = 0; i < 4; ++i) held.push_back(connect_loopback(s.port()));
  std::this_thread::sleep_for(200ms);  // accepted (they send nothing yet)
  HttpReply r = http_request(s.port(), "GET", "/health", "", {}, 10s);
  EXPECT_EQ(r.status, 503) << r.body;
  EXPECT_EQ(r.header("retry-after"), "1");
  EXPECT_NE(r.body.find("--max-connections"), std::string::npos) << r.body;
  for (int fd : held) close(fd);
  std::this_thread::sleep_for(200ms);
  EXPECT_EQ(http_request(s.port(), "GET", "/health").status, 200);
  EXPECT_EQ(s.stop(), 0) << s.log();
}

TEST(HttpServe, SlowHeadGets408AndIdleConnectionsClose) {
  ServeProcess s({"--header-timeout", "1", "--idle-timeout", "1"});
  const int fd = connect_loopback(s.port());
  const auto t0 = std::chrono::steady_clock::now();
  ASSERT_TRUE(send_all(fd, "GET /health HTTP/1.1\r\nHo"));
  std::string raw;
  for (int i = 0; i < 6 && raw.empty(); ++i) {  // one byte every 0.5 s: never a whole head in time
    std::this_thread::sleep_for(500ms);
    send_all(fd, "s");
    raw += read_all(fd, 1ms);
  }
  raw += read_all(fd, 3s);
  close(fd);
  EXPECT_EQ(parse_reply(raw).status, 408) << raw;
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 5s);
  // A keep-alive connection that sends nothing more is closed after --idle-timeout.
  const int idle = connect_loopback(s.port());
  ASSERT_TRUE(send_all(idle, "GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"));
  const auto t1 = std::chrono::steady_clock::now();
  const std::string got = read_all(idle, 5s);  // returns when the server closes
  close(idle);
  EXPECT_NE(got.find("200 OK"), std::string::npos);
  EXPECT_LT(std::chrono::steady_clock::now() - t1, 4s);
  EXPECT_EQ(s.stop(), 0) << s.log();
}

TEST(HttpServe, TricklingConnectionsDoNotHoldShutdownAndASecondSignalExitsAtOnce) {
  {
    ServeProcess s({"--header-timeout", "60"});
    std::vector<int> slow;
    for (int i = 0; i < 32; ++i) {
      slow.push_back(connect_loopback(s.port()));
      send_all(slow.back(), "GET /health HTTP/1.1\r\nX-Slow: ");
    }
    std::this_thread::sleep_for(200ms);
    const auto t0 = std::chrono::steady_clock::now();
    EXPECT_EQ(s.stop(SIGTERM), 0) << s.log();
    EXPECT_LT(std::chrono::steady_clock::now() - t0, 5s);
    for (int fd : slow) close(fd);
  }
  ServeProcess s({"--shutdown-timeout", "60"});
  RawConnection endless(s.port());
  endless.post("/v1/completions", R"({"prompt": "ROMEO:", "stream": true, "max_tokens": 60000})");
  ASSERT_TRUE(endless.read_until("\"text\""));
  kill(s.pid(), SIGTERM);  // would wait up to 60 s for the stream
  std::this_thread::sleep_for(300ms);
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_EQ(s.stop(SIGTERM, 10s), 128 + SIGTERM) << s.log();
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 2s);
}

TEST(HttpPolicy, Bearer) {
  EXPECT_TRUE(server::bearer_matches("Bearer k3y", "k3y"));
  EXPECT_TRUE(server::bearer_matches("  bearer   k3y  ", "k3y"));
  EXPECT_FALSE(server::bearer_matches("Bearer k3", "k3y"));
  EXPECT_FALSE(server::bearer_matches("Bearer k3yy", "k3y"));
  EXPECT_FALSE(server::bearer_matches("Bearer K3Y", "k3y"));
  EXPECT_FALSE(server::bearer_matches("Bearerk3y", "k3y"));
  EXPECT_FALSE(server::bearer_matches("Bearer ", ""));
}

TEST(HttpPolicy, HostsAndOrigins) {
  EXPECT_TRUE(server::is_loopback_address("127.0.0.1"));
  EXPECT_TRUE(server::is_loopback_address("::1"));
  EXPECT_FALSE(server::is_loopback_address("0.0.0.0"));
  EXPECT_FALSE(server::is_loopback_address("127.0.0.256"));
  EXPECT_TRUE(server::loopback_host_allowed("localhost.:80", {}));
  EXPECT_TRUE(server::loopback_host_allowed("Box:1", {"box"}));
  EXPECT_FALSE(server::loopback_host_allowed("box.evil", {"box"}));
  EXPECT_FALSE(server::loopback_host_allowed("[::2]:80", {}));
  EXPECT_TRUE(server::origin_allowed("http://127.0.0.1:8000", "127.0.0.1:8000", {}));
  EXPECT_FALSE(server::origin_allowed("http://127.0.0.1:9000", "127.0.0.1:8000", {}));
  EXPECT_TRUE(server::origin_allowed("https://x.example", "h", {"https://x.example"}));
  EXPECT_TRUE(server::origin_allowed("https://y.example", "h", {"*"}));
  EXPECT_FALSE(server::origin_allowed("null", "h", {"https://x.example"}));
  EXPECT_EQ(server::printable(std::string("a\0b\n", 4)), "a\\x00b\\x0a");
}

// A connection whose peer is still there with nothing sent is Waiting, not Gone (the watch of a request
// being answered used to take "no bytes available" for a hang-up and dropped the request); bytes sent
// are HasData and stay unread; an orderly close or a reset is Gone.
TEST(HttpPolicy, PeerStateTellsAHangUpFromNothingToRead) {
  int sv[2];
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
  EXPECT_EQ(server::peer_state(sv[0]), server::PeerState::Waiting);
  ASSERT_EQ(send(sv[1], "x", 1, 0), 1);
  EXPECT_EQ(server::peer_state(sv[0]), server::PeerState::HasData);
  EXPECT_EQ(server::peer_state(sv[0]), server::PeerState::HasData);  // peeked, not consumed
  char c = 0;
  ASSERT_EQ(recv(sv[0], &c, 1, 0), 1);
  EXPECT_EQ(c, 'x');
  EXPECT_EQ(server::peer_state(sv[0]), server::PeerState::Waiting);
  ASSERT_EQ(shutdown(sv[1], SHUT_WR), 0);
  EXPECT_EQ(server::peer_state(sv[0]), server::PeerState::Gone);
  close(sv[0]);
  close(sv[1]);
  EXPECT_EQ(server::peer_state(-1), server::PeerState::Gone);  // not a socket: an error, not a wait
}

}  // namespace
}  // namespace dsv4::test
