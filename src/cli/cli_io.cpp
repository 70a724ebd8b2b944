#include "cli/cli_io.h"

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

}  // namespace dsv4::cli
