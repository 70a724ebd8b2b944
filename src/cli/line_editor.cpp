#include "cli/line_editor.h"

#include <histedit.h>
#include <langinfo.h>
#include <poll.h>
#include <unistd.h>

#include <csignal>

#include <cerrno>
#include <climits>
#include <clocale>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <cwchar>
#include <filesystem>

#include "cli/interrupt.h"

namespace dsv4::cli {
namespace {

constexpr const char* kPasteStart = "\033[200~";
constexpr const char* kPasteEnd = "\033[201~";

// libedit converts between the terminal's bytes and wide characters with the C library: it needs a
// UTF-8 LC_CTYPE even when the environment says "C".
void use_utf8_ctype() {
  std::setlocale(LC_CTYPE, "");
  if (std::strcmp(nl_langinfo(CODESET), "UTF-8") != 0) std::setlocale(LC_CTYPE, "C.UTF-8");
}

// Waits until stdin has a byte; false when a Ctrl-C is (or becomes) pending. SIGINT stays blocked from
// the check of the flag until ppoll unblocks it atomically: a Ctrl-C that arrives just before the wait
// (typed while the prompt was being drawn, when the terminal was still in cooked mode and flushed the
// line) cannot be lost in the gap and leave the read blocked.
bool wait_for_input() {
  sigset_t sigint, previous;
  sigemptyset(&sigint);
  sigaddset(&sigint, SIGINT);
  pthread_sigmask(SIG_BLOCK, &sigint, &previous);
  bool ready = false;
  while (!InterruptScope::pending()) {
    pollfd p{STDIN_FILENO, POLLIN, 0};
    const int r = ppoll(&p, 1, nullptr, &previous);
    if (r > 0 || (r < 0 && errno != EINTR)) {  // readable, or an error the read will report
      ready = true;
      break;
    }
  }
  pthread_sigmask(SIG_SETMASK, &previous, nullptr);
  return ready;
}

}  // namespace

LineEditor::LineEditor(const std::string& history_file) : file_(history_file) {
  use_utf8_ctype();
  hist_ = history_init();
  HistEvent ev;
  ::history(hist_, &ev, H_SETSIZE, 1000);
  ::history(hist_, &ev, H_SETUNIQUE, 1);
  if (!file_.empty()) ::history(hist_, &ev, H_LOAD, file_.c_str());
  el_ = el_init("dsv4", stdin, stdout, stderr);
  el_set(el_, EL_CLIENTDATA, this);
  el_set(el_, EL_EDITOR, "emacs");
  el_set(el_, EL_SIGNAL, 0);  // Ctrl-C is ours (InterruptScope), not libedit's
  el_set(el_, EL_PROMPT, &LineEditor::prompt_of);
  el_set(el_, EL_HIST, ::history, hist_);
  el_set(el_, EL_GETCFN, &LineEditor::read_char);
  // The wide form keeps our (static) strings; the narrow one copies them and never frees the copies.
  el_wset(el_, EL_ADDFN, L"dsv4-paste", L"Insert a bracketed paste as it is", &LineEditor::paste);
  el_set(el_, EL_BIND, kPasteStart, "dsv4-paste", nullptr);
  el_source(el_, nullptr);  // the user's ~/.editrc
}

LineEditor::~LineEditor() {
  el_end(el_);
  history_end(hist_);
}

char* LineEditor::prompt_of(editline* el) {
  void* self = nullptr;
  el_get(el, EL_CLIENTDATA, &self);
  return static_cast<LineEditor*>(self)->prompt_.data();
}

// One character from the terminal. A Ctrl-C (SIGINT, or the byte itself when the terminal does not
// signal) ends the line with an error, which el_gets reports as count -1.
int LineEditor::read_char(editline* el, wchar_t* c) {
  void* self = nullptr;
  el_get(el, EL_CLIENTDATA, &self);
  auto* ed = static_cast<LineEditor*>(self);
  std::mbstate_t st{};
  while (true) {
    if (!wait_for_input()) {
      ed->interrupted_ = true;
      return -1;
    }
    char b;
    const ssize_t n = ::read(STDIN_FILENO, &b, 1);
    if (n == 0) return 0;
    if (n < 0) {
      if (errno == EINTR && !InterruptScope::pending()) continue;
      ed->interrupted_ = errno == EINTR;
      return -1;
    }
    if (b == '\003') {
      ed->interrupted_ = true;
      return -1;
    }
    const size_t r = std::mbrtowc(c, &b, 1, &st);
    if (r == size_t(-2)) continue;  // more bytes of this character
    if (r == size_t(-1)) {          // not UTF-8: take the byte as it is
      *c = wchar_t(static_cast<unsigned char>(b));
      st = {};
    }
    return 1;
  }
}

// Bound to the terminal's paste start: everything up to the paste end goes into the line unchanged,
// newlines included (terminals send them as CR), so that a pasted block is one message.
unsigned char LineEditor::paste(editline* el, int) {
  std::string text;
  const std::string end = kPasteEnd;
  wchar_t wc;
  while (el_wgetc(el, &wc) == 1) {
    char buf[MB_LEN_MAX];
    std::mbstate_t st{};
    const size_t n = std::wcrtomb(buf, wc, &st);
    if (n == size_t(-1)) continue;
    text.append(buf, n);
    if (text.size() >= end.size() && text.compare(text.size() - end.size(), end.size(), end) == 0) {
      text.resize(text.size() - end.size());
      break;
    }
  }
  for (auto& ch : text)
    if (ch == '\r') ch = '\n';
  el_insertstr(el, text.c_str());
  return CC_REFRESH;
}

LineEditor::Input LineEditor::read(const std::string& prompt) {
  prompt_ = prompt;
  interrupted_ = false;
  std::fputs("\033[?2004h", stdout);  // bracketed paste on while editing
  std::fflush(stdout);
  int count = 0;
  const char* line = el_gets(el_, &count);
  std::fputs("\033[?2004l", stdout);
  std::fflush(stdout);
  Input in;
  if (!line) {
    in.status = interrupted_ || (count < 0 && InterruptScope::pending()) ? Status::Interrupted : Status::End;
    InterruptScope::clear();
    return in;
  }
  in.status = Status::Line;
  in.text = line;
  if (!in.text.empty() && in.text.back() == '\n') in.text.pop_back();
  return in;
}

void LineEditor::remember(const std::string& entry) {
  if (entry.empty()) return;
  HistEvent ev;
  ::history(hist_, &ev, H_ENTER, entry.c_str());
  if (!file_.empty()) ::history(hist_, &ev, H_SAVE, file_.c_str());
}

std::string chat_history_path() {
  std::filesystem::path dir;
  if (const char* x = std::getenv("XDG_STATE_HOME"); x && *x)
    dir = x;
  else if (const char* h = std::getenv("HOME"); h && *h)
    dir = std::filesystem::path(h) / ".local" / "state";
  else
    return "";
  dir /= "dsv4";
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return "";
  return (dir / "chat_history").string();
}

}  // namespace dsv4::cli
