#include "cli/interrupt.h"

#include <termios.h>
#include <unistd.h>

#include <csignal>

namespace dsv4::cli {
namespace {

// A signal handler can only reach static storage: the one flag of the process (not state of a command).
volatile std::sig_atomic_t g_interrupted = 0;
struct sigaction g_previous {};

void on_sigint(int) { g_interrupted = 1; }

}  // namespace

InterruptScope::InterruptScope() {
  g_interrupted = 0;
  struct sigaction sa {};
  sa.sa_handler = on_sigint;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = 0;  // no SA_RESTART: a blocking read returns EINTR, so the line editor sees the key
  sigaction(SIGINT, &sa, &g_previous);
}

InterruptScope::~InterruptScope() { sigaction(SIGINT, &g_previous, nullptr); }

bool InterruptScope::pending() { return g_interrupted != 0; }
void InterruptScope::clear() { g_interrupted = 0; }

TypeAheadScope::TypeAheadScope() {
  if (!isatty(STDIN_FILENO) || tcgetattr(STDIN_FILENO, &saved_) != 0) return;
  active_ = true;
  apply();
}

void TypeAheadScope::apply() {
  if (!active_) return;
  termios t = saved_;
  t.c_lflag &= ~tcflag_t(ECHO | ICANON);
  t.c_cc[VMIN] = 1;
  t.c_cc[VTIME] = 0;
  tcsetattr(STDIN_FILENO, TCSANOW, &t);
}

TypeAheadScope::~TypeAheadScope() {
  if (active_) tcsetattr(STDIN_FILENO, TCSANOW, &saved_);
}

}  // namespace dsv4::cli
