// Ctrl-C as a request rather than the end of the process: while an InterruptScope lives, SIGINT only
// raises a flag that the chat loop and the generation (cli/generation.h) poll; a reply stops, the
// session goes on. Outside a scope SIGINT has its default action again.
#pragma once
#include <termios.h>

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
// the streamed reply, and the terminal is not in line (canonical) mode, so that every key is a byte
// queued for the next prompt: a Ctrl-D or a line typed while the prompt is being drawn is not held in,
// or lost from, the line discipline's buffer. Ctrl-C still raises SIGINT. The line editor puts the
// terminal back into its own idea of cooked mode after each line: apply() again after each read. The
// terminal's settings from before are restored at the end.
class TypeAheadScope {
 public:
  TypeAheadScope();
  ~TypeAheadScope();
  TypeAheadScope(const TypeAheadScope&) = delete;
  TypeAheadScope& operator=(const TypeAheadScope&) = delete;
  void apply();

 private:
  bool active_ = false;
  termios saved_{};
};

}  // namespace dsv4::cli
