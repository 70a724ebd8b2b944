// Runs a command on a pseudo-terminal, as a person at a terminal would: what it prints is read back,
// keys (arrows, Ctrl-C, a bracketed paste) are written to it. Every wait is bounded.
#pragma once
#include <poll.h>
#include <pty.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <string>

namespace dsv4::test {

class PtySession {
 public:
  // `command` (one program and its arguments, shell-quoted) runs under /bin/sh -c "exec command".
  explicit PtySession(const std::string& command) {
    pid_ = forkpty(&fd_, nullptr, nullptr, nullptr);
    if (pid_ == 0) {
      setenv("TERM", "xterm", 1);
      // exec: the command itself is the terminal's foreground process, so that a Ctrl-C reaches only
      // it (a shell waiting for it would die of the SIGINT the command handles).
      const std::string line = "exec " + command;
      execl("/bin/sh", "sh", "-c", line.c_str(), static_cast<char*>(nullptr));
      _exit(127);
    }
  }
  ~PtySession() {
    if (pid_ > 0 && !exited_) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
    if (fd_ >= 0) close(fd_);
  }
  bool started() const { return pid_ > 0; }

  void send(const std::string& keys) {
    size_t done = 0;
    while (done < keys.size()) {
      const ssize_t n = write(fd_, keys.data() + done, keys.size() - done);
      if (n <= 0) return;
      done += size_t(n);
    }
  }

  // Reads until `needle` appears after the current mark (then moves the mark past it) or `seconds`
  // pass. Returns whether it appeared.
  bool expect(const std::string& needle, double seconds = 60) {
    const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
    while (true) {
      const size_t at = out_.find(needle, mark_);
      if (at != std::string::npos) {
        mark_ = at + needle.size();
        return true;
      }
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(end - std::chrono::steady_clock::now());
      if (left.count() <= 0 || !read_some(int(left.count()))) return false;
    }
  }
  // Everything read since the mark (reading for `seconds` more first).
  std::string drain(double seconds) {
    const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
    while (true) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(end - std::chrono::steady_clock::now());
      if (left.count() <= 0 || !read_some(int(left.count()))) break;
    }
    return out_.substr(mark_);
  }
  const std::string& output() const { return out_; }

  // The exit status once the process ends (128 + N for signal N; reading its output meanwhile), -1
  // after `seconds`.
  int wait(double seconds = 60) {
    const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
    while (std::chrono::steady_clock::now() < end) {
      int status = 0;
      if (waitpid(pid_, &status, WNOHANG) == pid_) {
        exited_ = true;
        while (read_some(50)) {
        }
        return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);  // as a shell reports it
      }
      read_some(50);
    }
    return -1;
  }

 private:
  bool read_some(int timeout_ms) {
    pollfd p{fd_, POLLIN, 0};
    if (poll(&p, 1, timeout_ms) <= 0) return false;
    char buf[4096];
    const ssize_t n = read(fd_, buf, sizeof buf);
    if (n <= 0) return false;
    out_.append(buf, size_t(n));
    return true;
  }

  pid_t pid_ = -1;
  int fd_ = -1;
  bool exited_ = false;
  std::string out_;
  size_t mark_ = 0;
};

}  // namespace dsv4::test
