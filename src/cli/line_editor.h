// The chat's input line on a terminal: libedit (BSD-licensed, Debian's libedit-dev) for editing, history
// kept in a file, and bracketed paste (a pasted block, newlines and all, becomes one message). Ctrl-C
// while editing abandons the line (InterruptScope must be alive, cli/interrupt.h).
#pragma once
#include <string>

struct editline;
struct history;

namespace dsv4::cli {

class LineEditor {
 public:
  enum class Status { Line, Interrupted, End };
  struct Input {
    Status status = Status::End;
    std::string text;  // the line without its final newline (a paste may hold newlines)
  };

  // history_file: where history is loaded from and saved to ("" keeps it in memory only).
  explicit LineEditor(const std::string& history_file);
  ~LineEditor();
  LineEditor(const LineEditor&) = delete;
  LineEditor& operator=(const LineEditor&) = delete;

  Input read(const std::string& prompt);
  void remember(const std::string& entry);  // adds to the history (and saves the file)

 private:
  static char* prompt_of(editline* el);
  static int read_char(editline* el, wchar_t* c);
  static unsigned char paste(editline* el, int key);

  editline* el_ = nullptr;
  struct history* hist_ = nullptr;
  std::string file_, prompt_;
  bool interrupted_ = false;
};

// $XDG_STATE_HOME/dsv4/chat_history (default ~/.local/state/dsv4/chat_history); the folder is made.
// "" when neither variable is set or the folder cannot be made.
std::string chat_history_path();

}  // namespace dsv4::cli
