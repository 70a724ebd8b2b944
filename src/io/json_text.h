// Quoting pieces of a (possibly hostile) file in one-line error messages: control bytes escaped,
// lengths and JSON nesting bounded (nlohmann's dump() recurses without limit).
#pragma once
#include <nlohmann/json.hpp>

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

}  // namespace dsv4::json_text
