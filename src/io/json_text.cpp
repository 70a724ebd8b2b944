#include "io/json_text.h"

#include <cstdio>

#include "core/error.h"

namespace dsv4::json_text {
namespace {

using json = nlohmann::json;

void render(const json& j, std::string& out, int depth) {
  if (!j.is_structured()) {
    out += j.dump(-1, ' ', false, json::error_handler_t::replace);
    return;
  }
  const bool arr = j.is_array();
  if (depth >= 3) {
    out += arr ? "[...]" : "{...}";
    return;
  }
  out += arr ? '[' : '{';
  size_t i = 0;
  for (auto it = j.begin(); it != j.end(); ++it, ++i) {
    if (i) out += ',';
    if (i == 8 || out.size() > 100) {
      out += "...";
      break;
    }
    if (!arr) out += json(it.key()).dump(-1, ' ', false, json::error_handler_t::replace) + ':';
    render(*it, out, depth + 1);
  }
  out += arr ? ']' : '}';
}

}  // namespace

std::string printable(std::string_view s, size_t max_len) {
  std::string out;
  for (size_t i = 0; i < s.size() && i < max_len; ++i) {
    unsigned char c = static_cast<unsigned char>(s[i]);
    if (c < 0x20 || c == 0x7f) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", c);
      out += buf;
    } else {
      out += char(c);
    }
  }
  if (s.size() > max_len) out += "...";
  return out;
}

std::string excerpt(const json& j, size_t max_len) {
  std::string text;
  render(j, text, 0);
  return printable(text, max_len);
}

std::string describe(const json& j, size_t max_len) { return cat(j.type_name(), ' ', excerpt(j, max_len)); }

std::string reason(const json::exception& e) {
  std::string_view w = e.what();
  if (size_t start = w.find("] "); start != std::string_view::npos) w = w.substr(start + 2);
  if (size_t col = w.find("column "); col != std::string_view::npos)
    if (size_t colon = w.find(": ", col); colon != std::string_view::npos) w = w.substr(colon + 2);
  return printable(w, 240);
}

}  // namespace dsv4::json_text
