#include "cli/cli_io.h"

#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <iostream>
#include <sstream>

#include "core/error.h"

namespace dsv4::cli {

std::string read_input_file(const std::string& path) {
  std::ostringstream ss;
  if (path == "-") {
    ss << std::cin.rdbuf();
    return ss.str();
  }
  std::ifstream f(path, std::ios::binary);
  if (!f) fail(path, ": cannot open");
  ss << f.rdbuf();
  return ss.str();
}

void print_ids(const std::vector<int32_t>& ids, bool json) {
  std::string out = json ? "[" : "";
  for (size_t i = 0; i < ids.size(); ++i) {
    if (i) out += json ? ", " : " ";
    out += std::to_string(ids[i]);
  }
  out += json ? "]\n" : "\n";
  std::fwrite(out.data(), 1, out.size(), stdout);
}

void write_text(const std::string& text) {
  std::fwrite(text.data(), 1, text.size(), stdout);
  if (isatty(STDOUT_FILENO) && (text.empty() || text.back() != '\n')) std::fputs("\n", stdout);
}

}  // namespace dsv4::cli
