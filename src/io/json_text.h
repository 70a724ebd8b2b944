// Quoting pieces of a (possibly hostile) file in one-line error messages: control bytes escaped,
// lengths and JSON nesting bounded (nlohmann's dump() recurses without limit); and the nesting check
// that makes hostile JSON text safe to parse.
#pragma once
#include <nlohmann/json.hpp>

#include <optional>
#include <string>
#include <string_view>

namespace dsv4::json_text {

// Text made safe for a one-line message: control bytes as \xNN, cut to max_len with "...".
std::string printable(std::string_view s, size_t max_len = 160);
// Compact JSON text of `j`, at most 3 levels and ~8 items per level, cut to max_len.
std::string excerpt(const nlohmann::json& j, size_t max_len = 80);
// "string \"F7\"", "array [1,-2]", ...
std::string describe(const nlohmann::json& j, size_t max_len = 80);
// The reason part of a nlohmann exception ("[json.exception.parse_error.101] parse error at line 1,
// column 5: <reason>" -> "<reason>"); callers report the position themselves.
std::string reason(const nlohmann::json::exception& e);

// Nesting of JSON text the parsers accept from untrusted sources (request bodies, JSON strings inside
// them, chat documents). nlohmann parses iteratively, but copies, comparisons and dump() recurse: a
// value nested 35,000 deep overflows a thread's stack. Real documents (tool schemas included) stay
// far below this.
inline constexpr int kMaxJsonDepth = 64;

// Where `text` first nests arrays and objects deeper than `max_depth` (the outermost array or object
// is level 1).
struct TooDeep {
  std::string path;  // the member that crosses the limit, e.g. "tools[0].function.parameters.x" ("" = the top)
};
// Scans `text` (events only, builds no value, needs no stack) and returns the first place it nests
// deeper than `max_depth`, or nullopt. Malformed JSON ends the scan without a result: parse the text
// afterwards to get its syntax error. The path names at most `path_parts` members (keys or [index]),
// so that it stays short enough for a one-line message.
std::optional<TooDeep> find_too_deep(std::string_view text, int max_depth = kMaxJsonDepth, size_t path_parts = 6);

}  // namespace dsv4::json_text
