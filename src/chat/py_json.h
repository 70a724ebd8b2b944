// JSON text exactly as Python's json.dumps(value, ensure_ascii=False) writes it, which is what the
// DeepSeek encoder puts into prompts (tool schemas, non-string tool arguments, response formats):
// ", " and ": " separators, keys in document order (use nlohmann::ordered_json), non-ASCII characters
// raw, control characters as \uXXXX except \b \f \n \r \t, floats as Python's repr (shortest
// round-trip digits; exponent form below 1e-4 and from 1e16 on, e.g. 1e-05, 1e+16; integral
// floats keep ".0").
//
// Known difference: integers beyond 64 bits are parsed by nlohmann as doubles, so they print as
// floats where Python would keep every digit.
#pragma once
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace dsv4::chat {

std::string py_dumps(const nlohmann::ordered_json& value);

// A JSON string literal (with the quotes) the way Python's json.dumps(s, ensure_ascii=False) writes it.
std::string py_dumps_string(std::string_view s);

// Appends the escaped body of a string literal (without quotes); escaping is per byte, so pieces of a
// string can be escaped one after another.
void py_escape_append(std::string& out, std::string_view s);

// Python's repr(float).
std::string py_float_repr(double v);

// Python's str(x) for the JSON scalars the encoder formats into text ("None", "True", "3", "0.5").
std::string py_str(const nlohmann::ordered_json& value);

// Python truthiness of a JSON value: null, false, 0, "", [] and {} are false.
bool py_truthy(const nlohmann::ordered_json& value);

}  // namespace dsv4::chat
