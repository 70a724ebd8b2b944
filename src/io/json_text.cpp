#include "io/json_text.h"

#include <cstdio>
#include <vector>

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

// SAX events of nlohmann's (iterative) parser: tracks the position as a path of members and stops at
// the first container deeper than the limit.
class DepthScan {
 public:
  DepthScan(int max_depth, size_t path_parts) : max_depth_(max_depth), path_parts_(path_parts) {}

  bool null() { return value(); }
  bool boolean(bool) { return value(); }
  bool number_integer(json::number_integer_t) { return value(); }
  bool number_unsigned(json::number_unsigned_t) { return value(); }
  bool number_float(json::number_float_t, const json::string_t&) { return value(); }
  bool string(json::string_t&) { return value(); }
  bool binary(json::binary_t&) { return value(); }
  bool start_object(size_t) { return open(false); }
  bool start_array(size_t) { return open(true); }
  bool key(json::string_t& k) {
    frames_.back().key = std::move(k);
    return true;
  }
  bool end_object() { return close(); }
  bool end_array() { return close(); }
  bool parse_error(size_t, const std::string&, const nlohmann::detail::exception&) { return false; }

  std::optional<TooDeep> result;

 private:
  struct Frame {
    bool array;
    size_t index = 0;
    std::string key;
  };

  bool value() {
    if (!frames_.empty() && frames_.back().array) ++frames_.back().index;
    return true;
  }
  bool open(bool array) {
    if (int(frames_.size()) >= max_depth_) {
      result = TooDeep{path()};
      return false;
    }
    frames_.push_back({array, 0, {}});
    return true;
  }
  bool close() {
    frames_.pop_back();
    return value();
  }
  // The member being read in each open container, outermost first.
  std::string path() const {
    std::string p;
    for (size_t i = 0; i < frames_.size() && i < path_parts_; ++i) {
      const Frame& f = frames_[i];
      if (f.array) {
        p += cat('[', f.index, ']');
      } else {
        if (!p.empty()) p += '.';
        p += printable(f.key, 40);
      }
    }
    return p;
  }

  int max_depth_;
  size_t path_parts_;
  std::vector<Frame> frames_;
};

}  // namespace

std::optional<TooDeep> find_too_deep(std::string_view text, int max_depth, size_t path_parts) {
  DepthScan scan(max_depth, path_parts);
  json::sax_parse(text.begin(), text.end(), &scan, json::input_format_t::json, /*strict=*/false);
  return scan.result;
}

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
