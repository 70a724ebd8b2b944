#include "chat/parser.h"

#include <initializer_list>
#include <set>

#include "chat/dsml.h"
#include "chat/templates.h"
#include "core/error.h"
#include "tokenizer/utf8.h"

namespace dsv4::chat {
namespace {

// Python's str.isspace() for one code point (what \s matches in a str regex).
bool py_space(uint32_t c) {
  return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

// Python's `$` without MULTILINE: the end, or just before a final "\n". The candidate end positions
// for a pattern ending in `<tail>$`, smallest first.
std::vector<size_t> tail_positions(std::string_view s, std::string_view tail) {
  std::vector<size_t> out;
  if (s.size() >= tail.size() + 1 && s.back() == '\n' &&
      s.substr(s.size() - 1 - tail.size(), tail.size()) == tail)
    out.push_back(s.size() - 1 - tail.size());
  if (s.size() >= tail.size() && s.substr(s.size() - tail.size()) == tail) out.push_back(s.size() - tail.size());
  return out;
}

struct Stop {
  size_t next;       // index after the stop (or the end of the text)
  std::string_view content;
  int which;         // index into the stop list, or -1 when none was found
};

// _read_until_stop: the earliest occurrence of any stop (the first listed wins a tie).
Stop read_until_stop(std::string_view text, size_t index, std::initializer_list<std::string_view> stops) {
  size_t best = std::string_view::npos;
  int which = -1, k = 0;
  for (std::string_view s : stops) {
    size_t p = text.find(s, index);
    if (p != std::string_view::npos && (best == std::string_view::npos || p < best)) {
      best = p;
      which = k;
    }
    ++k;
  }
  if (which < 0) return {text.size(), text.substr(index), -1};
  return {best + std::data(stops)[which].size(), text.substr(index, best - index), which};
}

std::string shown(std::string_view s) { return std::string(s.substr(0, 80)) + (s.size() > 80 ? "..." : ""); }

}  // namespace

bool parse_invoke_name(std::string_view h, std::string* name) {
  size_t i = 0;
  while (i < h.size()) {
    size_t len = utf8::valid_seq_len(h, i);
    if (len == 0 || !py_space(utf8::decode(h, i, &len))) break;
    i += len;
  }
  constexpr std::string_view open = "name=\"";
  if (h.substr(i, open.size()) != open) return false;
  const size_t start = i + open.size();
  for (size_t p : tail_positions(h, "\">\n")) {
    if (p >= start) {
      *name = std::string(h.substr(start, p - start));
      return true;
    }
  }
  return false;
}

bool parse_param(std::string_view b, std::string* name, bool* is_string, std::string* value) {
  constexpr std::string_view open = " name=\"";
  if (b.substr(0, open.size()) != open) return false;
  const std::vector<size_t> ends = tail_positions(b, "<");
  if (ends.empty()) return false;
  const size_t q = ends.front();  // the value ends at the only possible '<' (see tail_positions)
  constexpr std::string_view kTrue = "\" string=\"true\">", kFalse = "\" string=\"false\">";
  for (size_t n = open.size(); n < b.size(); ++n) {
    for (bool str : {true, false}) {
      std::string_view marker = str ? kTrue : kFalse;
      if (b.substr(n, marker.size()) != marker) continue;
      const size_t vstart = n + marker.size();
      if (vstart > q) continue;
      *name = std::string(b.substr(open.size(), n - open.size()));
      *is_string = str;
      *value = std::string(b.substr(vstart, q - vstart));
      return true;
    }
  }
  return false;
}

ParsedMessage parse_completion(std::string_view text, ThinkingMode mode) {
  ParsedMessage out;
  size_t index = 0;
  if (mode == ThinkingMode::Thinking) {
    Stop s = read_until_stop(text, index, {kThinkEnd, kToolCallsStart});
    if (s.which != 0) fail("invalid thinking format: missing </think>");
    out.reasoning_content = std::string(s.content);
    index = s.next;
  }
  Stop s = read_until_stop(text, index, {kEos, kToolCallsStart});
  out.content = std::string(s.content);
  index = s.next;
  int last_stop = s.which;  // 0 = EOS, 1 = tool calls, -1 = none
  if (last_stop == 1) {
    // parse_tool_calls
    while (index < text.size()) {
      Stop t = read_until_stop(text, index, {kInvokeOpen, kToolCallsClose});
      if (t.content != ">\n") fail("tool call format error: expected '>\\n' but got '", shown(t.content), "'");
      index = t.next;
      if (t.which == 1) break;
      if (t.which < 0) fail("tool call format error: missing special token in tool calls");
      Stop h = read_until_stop(text, index, {kParamOpen, kInvokeClose});
      index = h.next;
      ToolCall call;
      if (!parse_invoke_name(h.content, &call.name)) fail("tool name format error: '", shown(h.content), "'");
      std::vector<DsmlParam> params;
      std::set<std::string> seen;
      int stop = h.which;
      while (stop == 0) {
        Stop p = read_until_stop(text, index, {kParamEnd});
        index = p.next;
        DsmlParam param;
        if (!parse_param(p.content, &param.name, &param.is_string, &param.value))
          fail("parameter format error: '", shown(p.content), "'");
        if (!seen.insert(param.name).second) fail("duplicate parameter name: '", param.name, "'");
        params.push_back(std::move(param));
        Stop a = read_until_stop(text, index, {kParamOpen, kInvokeClose});
        index = a.next;
        if (a.content != ">\n") fail("parameter format error: expected '>\\n' but got '", shown(a.content), "'");
        stop = a.which;
      }
      call.arguments = decode_dsml_arguments(params);
      out.tool_calls.push_back(std::move(call));
      if (stop < 0) break;  // ran out of text inside an invoke, like the reference
    }
    Stop e = read_until_stop(text, index, {kEos});
    if (!e.content.empty()) fail("unexpected content after tool calls: '", shown(e.content), "'");
    index = e.next;
    last_stop = e.which < 0 ? -1 : 0;
  } else if (last_stop != 0) {
    fail("invalid format: missing end-of-sentence token");
  }
  if (index != text.size() || last_stop == 1) fail("unexpected content at the end: '", shown(text.substr(index)), "'");
  for (std::string_view tok : {kBos, kEos, kThinkStart, kThinkEnd, kDsml}) {
    if (out.content.find(tok) != std::string::npos || out.reasoning_content.find(tok) != std::string::npos)
      fail("unexpected special token '", tok, "' in content");
  }
  return out;
}

nlohmann::ordered_json ParsedMessage::to_json() const {
  nlohmann::ordered_json calls = nlohmann::ordered_json::array();
  for (const ToolCall& c : tool_calls)
    calls.push_back({{"type", "function"}, {"function", {{"name", c.name}, {"arguments", c.arguments}}}});
  return {{"role", "assistant"}, {"content", content}, {"reasoning_content", reasoning_content}, {"tool_calls", calls}};
}

}  // namespace dsv4::chat
