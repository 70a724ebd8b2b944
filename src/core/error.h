// Errors at the boundaries (load, API, CLI): one exception type carrying a one-line message that names
// the file / tensor / field and what was expected. Hot loops use assertions instead.
#pragma once
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>

namespace dsv4 {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& msg) : std::runtime_error(msg) {}
};

// Concatenates its arguments with operator<< into one message.
template <typename... Args>
std::string cat(Args&&... args) {
  std::ostringstream os;
  (os << ... << std::forward<Args>(args));
  return os.str();
}

template <typename... Args>
[[noreturn]] void fail(Args&&... args) {
  throw Error(cat(std::forward<Args>(args)...));
}

}  // namespace dsv4
