// Runs the real `dsv4 serve --port 0 ...` for a test: waits for the URL it prints, answers its port,
// and stops it with a signal (SIGKILL as a last resort) within bounded time. Plus a raw loopback
// connection for the cases an HTTP library hides (a client that hangs up mid-response).
#pragma once
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "support/test_paths.h"

namespace dsv4::test {

class ServeProcess {
 public:
  explicit ServeProcess(const std::vector<std::string>& args, std::chrono::seconds limit = std::chrono::seconds(60)) {
    log_ = (std::filesystem::temp_directory_path() / ("dsv4-serve-" + std::to_string(std::random_device{}()) + ".log"))
               .string();
    int out[2];
    if (pipe2(out, O_CLOEXEC) != 0) throw std::runtime_error("pipe failed");
    std::vector<std::string> argv = {dsv4_binary(), "serve", "--port", "0"};
    argv.insert(argv.end(), args.begin(), args.end());
    std::vector<char*> cargv;  // built before fork: the child only makes async-signal-safe calls
    for (auto& a : argv) cargv.push_back(a.data());
    cargv.push_back(nullptr);
    const int err = open(log_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    pid_ = fork();
    if (pid_ == 0) {
      dup2(out[1], STDOUT_FILENO);
      if (err >= 0) dup2(err, STDERR_FILENO);
      close(out[0]);
      execv(cargv[0], cargv.data());
      _exit(127);
    }
    if (err >= 0) close(err);
    close(out[1]);
    out_ = out[0];
    // The ready line: "dsv4 serve: ... on http://127.0.0.1:PORT".
    std::string text;
    const auto deadline = std::chrono::steady_clock::now() + limit;
    while (port_ == 0 && std::chrono::steady_clock::now() < deadline) {
      pollfd p{out_, POLLIN, 0};
      if (poll(&p, 1, 100) <= 0) continue;
      char buf[512];
      ssize_t n = read(out_, buf, sizeof buf);
      if (n <= 0) break;
      text.append(buf, size_t(n));
      const size_t at = text.find("http://127.0.0.1:");
      if (at != std::string::npos && text.find('\n', at) != std::string::npos)
        port_ = std::atoi(text.c_str() + at + std::strlen("http://127.0.0.1:"));
    }
    if (port_ == 0) {
      stop(SIGKILL);
      throw std::runtime_error("dsv4 serve did not start: " + text + "\n" + log());
    }
    ready_ = text;
  }

  ~ServeProcess() {
    if (pid_ > 0) stop(SIGTERM);
    if (out_ >= 0) close(out_);
    std::filesystem::remove(log_);
  }

  int port() const { return port_; }
  pid_t pid() const { return pid_; }

  // Sends `sig` and waits up to `limit` for the exit; returns the exit status (-1: killed or a signal).
  int stop(int sig = SIGTERM, std::chrono::seconds limit = std::chrono::seconds(30)) {
    if (pid_ <= 0) return status_;
    kill(pid_, sig);
    const auto deadline = std::chrono::steady_clock::now() + limit;
    int st = 0;
    while (waitpid(pid_, &st, WNOHANG) == 0) {
      if (std::chrono::steady_clock::now() > deadline) {
        kill(pid_, SIGKILL);
        waitpid(pid_, &st, 0);
        pid_ = -1;
        return status_ = -1;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    pid_ = -1;
    return status_ = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  }

  const std::string& ready_text() const { return ready_; }  // stdout up to the ready line
  std::string log() const {
    std::ifstream in(log_);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  }

 private:
  pid_t pid_ = -1;
  int out_ = -1, port_ = 0, status_ = -1;
  std::string log_;
  std::string ready_;
};

// One HTTP/1.1 connection on loopback, written and read by hand.
class RawConnection {
 public:
  explicit RawConnection(int port) {
    fd_ = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(uint16_t(port));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) throw std::runtime_error("connect failed");
  }
  ~RawConnection() { hang_up(); }

  void post(const std::string& path, const std::string& body) {
    const std::string req = "POST " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                            "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
    if (::send(fd_, req.data(), req.size(), MSG_NOSIGNAL) != ssize_t(req.size())) throw std::runtime_error("send failed");
  }

  // Reads until `needle` has arrived (true) or the connection closes or `limit` passes (false).
  bool read_until(const std::string& needle, std::chrono::seconds limit = std::chrono::seconds(30)) {
    const auto deadline = std::chrono::steady_clock::now() + limit;
    while (received_.find(needle) == std::string::npos) {
      if (std::chrono::steady_clock::now() > deadline) return false;
      pollfd p{fd_, POLLIN, 0};
      if (poll(&p, 1, 50) <= 0) continue;
      char buf[4096];
      ssize_t n = recv(fd_, buf, sizeof buf, 0);
      if (n <= 0) return false;
      received_.append(buf, size_t(n));
    }
    return true;
  }

  const std::string& received() const { return received_; }

  void hang_up() {
    if (fd_ >= 0) close(fd_);
    fd_ = -1;
  }

 private:
  int fd_ = -1;
  std::string received_;
};

// The value of the first sample of `name` in Prometheus text (NaN when absent).
inline double metric(const std::string& text, const std::string& name) {
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    if (line.rfind(name, 0) != 0 || line.size() <= name.size()) continue;
    const char next = line[name.size()];
    if (next != '{' && next != ' ') continue;
    return std::strtod(line.c_str() + line.rfind(' ') + 1, nullptr);
  }
  return std::nan("");
}

}  // namespace dsv4::test
