// A small blocking HTTP/1.1 client on loopback for the server tests: one request per connection
// (Connection: close), read to the end within a deadline; Content-Length and chunked bodies decoded.
#pragma once
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cctype>
#include <chrono>
#include <cstdlib>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace dsv4::test {

using Headers = std::vector<std::pair<std::string, std::string>>;

struct HttpReply {
  int status = 0;  // 0: no answer (refused, timed out, malformed)
  std::map<std::string, std::string> headers;  // names in lower case
  std::string body;
  std::string header(const std::string& lower_name) const {
    auto it = headers.find(lower_name);
    return it == headers.end() ? "" : it->second;
  }
};

inline int connect_loopback(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(uint16_t(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (fd >= 0 && connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0) return fd;
  if (fd >= 0) close(fd);
  return -1;
}

// Parses a complete response (status line, headers, body); status 0 when it is not one.
inline HttpReply parse_reply(const std::string& raw) {
  HttpReply r;
  const size_t head_end = raw.find("\r\n\r\n");
  if (raw.rfind("HTTP/1.", 0) != 0 || head_end == std::string::npos) return r;
  size_t at = raw.find("\r\n");
  const int status = std::atoi(raw.c_str() + 9);
  while (at < head_end) {
    const size_t next = raw.find("\r\n", at + 2);
    const std::string line = raw.substr(at + 2, next - at - 2);
    const size_t colon = line.find(':');
    if (colon != std::string::npos) {
      std::string name = line.substr(0, colon), value = line.substr(colon + 1);
      for (char& c : name) c = char(std::tolower(static_cast<unsigned char>(c)));
      while (!value.empty() && value.front() == ' ') value.erase(0, 1);
      r.headers[name] = value;
    }
    at = next;
  }
  std::string body = raw.substr(head_end + 4);
  if (r.header("transfer-encoding") == "chunked") {
    std::string out;
    size_t p = 0;
    for (;;) {
      const size_t eol = body.find("\r\n", p);
      if (eol == std::string::npos) return r;  // cut short
      const size_t n = std::strtoul(body.c_str() + p, nullptr, 16);
      if (n == 0) break;
      if (eol + 2 + n > body.size()) return r;
      out += body.substr(eol + 2, n);
      p = eol + 2 + n + 2;
    }
    body = std::move(out);
  } else if (!r.header("content-length").empty()) {
    const size_t n = std::strtoul(r.header("content-length").c_str(), nullptr, 10);
    if (body.size() < n) return r;
    body.resize(n);
  }
  r.body = std::move(body);
  r.status = status;
  return r;
}

// Reads from `fd` until the peer closes or `limit` passes.
inline std::string read_all(int fd, std::chrono::milliseconds limit) {
  std::string raw;
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < deadline) {
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, 20) <= 0) continue;
    char buf[16384];
    const ssize_t n = recv(fd, buf, sizeof buf, 0);
    if (n <= 0) break;
    raw.append(buf, size_t(n));
  }
  return raw;
}

// Reads from `fd` until a whole response has arrived (status 0 if the peer closes or `limit` passes).
inline HttpReply read_reply(int fd, std::chrono::milliseconds limit) {
  std::string raw;
  const auto deadline = std::chrono::steady_clock::now() + limit;
  HttpReply r;
  while (r.status == 0 && std::chrono::steady_clock::now() < deadline) {
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, 20) <= 0) continue;
    char buf[16384];
    const ssize_t n = recv(fd, buf, sizeof buf, 0);
    if (n <= 0) break;
    raw.append(buf, size_t(n));
    r = parse_reply(raw);
  }
  return r;
}

inline bool send_all(int fd, const std::string& data) {
  for (size_t at = 0; at < data.size();) {
    const ssize_t n = ::send(fd, data.data() + at, data.size() - at, MSG_NOSIGNAL);
    if (n <= 0) return false;
    at += size_t(n);
  }
  return true;
}

// One request: `method path`, `body` with Content-Length when not empty or when the method is POST.
inline HttpReply http_request(int port, const std::string& method, const std::string& path, const std::string& body = "",
                              const Headers& headers = {}, std::chrono::milliseconds limit = std::chrono::seconds(60)) {
  const int fd = connect_loopback(port);
  if (fd < 0) return {};
  std::string req = method + " " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n";
  bool typed = false;
  for (const auto& [k, v] : headers) {
    req += k + ": " + v + "\r\n";
    typed = typed || k == "Content-Type";
  }
  if (method == "POST" || !body.empty()) {
    if (!typed) req += "Content-Type: application/json\r\n";
    req += "Content-Length: " + std::to_string(body.size()) + "\r\n";
  }
  req += "\r\n" + body;
  HttpReply r;
  if (send_all(fd, req)) r = parse_reply(read_all(fd, limit));
  close(fd);
  return r;
}

}  // namespace dsv4::test
