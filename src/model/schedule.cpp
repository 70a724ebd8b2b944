#include "model/schedule.h"

#include <charconv>

#include "core/error.h"

namespace dsv4 {
namespace {

int64_t parse_positive(const std::string& s, const std::string& spec) {
  int64_t v = 0;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || p != s.data() + s.size() || v <= 0)
    fail("--schedule '", spec, "': '", s, "' is not a positive integer");
  return v;
}

}  // namespace

std::vector<int64_t> parse_schedule(const std::string& spec, int64_t n) {
  std::vector<int64_t> sizes;
  if (spec == "full") {
    sizes = {n};
  } else if (spec.rfind("decode:", 0) == 0) {
    sizes = {parse_positive(spec.substr(7), spec), 1};
  } else if (spec.rfind("chunks:", 0) == 0) {
    std::string rest = spec.substr(7);
    size_t start = 0;
    while (true) {
      size_t comma = rest.find(',', start);
      sizes.push_back(parse_positive(rest.substr(start, comma - start), spec));
      if (comma == std::string::npos) break;
      start = comma + 1;
    }
  } else {
    fail("--schedule: expected 'full', 'decode:P' or 'chunks:A,B,...', got '", spec, "'");
  }
  std::vector<int64_t> out;
  int64_t done = 0;
  for (size_t i = 0; done < n; ++i) {
    int64_t s = std::min(sizes[std::min(i, sizes.size() - 1)], n - done);
    out.push_back(s);
    done += s;
  }
  return out;
}

}  // namespace dsv4
