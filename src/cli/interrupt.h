// Ctrl-C as a request rather than the end of the process: while an InterruptScope lives, SIGINT only
// raises a flag that the chat loop and the generation (cli/generation.h) poll; a reply stops, the
// session goes on. Outside a scope SIGINT has its default action again.
#pragma once

namespace dsv4::cli {

class InterruptScope {
 public:
  InterruptScope();
  ~InterruptScope();
  InterruptScope(const InterruptScope&) = delete;
  InterruptScope& operator=(const InterruptScope&) = delete;

  static bool pending();  // Ctrl-C arrived since the last clear()
  static void clear();
};

// While alive (and stdin is a terminal): keys typed are not echoed, so that type-ahead does not mix into
// the streamed reply; they stay queued for the next prompt. Ctrl-C still raises SIGINT.
class NoEchoScope {
 public:
  NoEchoScope();
  ~NoEchoScope();
  NoEchoScope(const NoEchoScope&) = delete;
  NoEchoScope& operator=(const NoEchoScope&) = delete;

 private:
  bool active_ = false;
  unsigned saved_lflag_ = 0;
};

}  // namespace dsv4::cli
