// A small JSON Schema validator for the tests, written independently of the grammar compiler: it
// checks parsed values (nlohmann) and matches patterns and formats with std::regex. It knows the
// keywords that src/grammar/json_schema.h supports; oneOf requires exactly one branch.
#pragma once
#include <regex>
#include <string>

#include <nlohmann/json.hpp>

namespace dsv4::test {

inline int64_t utf8_length(const std::string& s) {
  int64_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;
  return n;
}

// Returns "" when `v` validates against `s` (root: the whole document, for $ref), else why not.
inline std::string validate(const nlohmann::ordered_json& v, const nlohmann::ordered_json& s, const nlohmann::ordered_json& root,
                            const std::string& at = "") {
  using json = nlohmann::ordered_json;
  if (s.is_boolean()) return s.get<bool>() ? "" : at + ": schema false";
  if (s.contains("$ref")) return validate(v, root.at(json::json_pointer(s["$ref"].get<std::string>().substr(1))), root, at);
  if (s.contains("anyOf")) {
    for (const auto& b : s["anyOf"])
      if (validate(v, b, root, at).empty()) return "";
    return at + ": no anyOf branch matches";
  }
  if (s.contains("oneOf")) {
    int n = 0;
    for (const auto& b : s["oneOf"]) n += validate(v, b, root, at).empty();
    return n == 1 ? "" : at + ": " + std::to_string(n) + " oneOf branches match";
  }
  if (s.contains("allOf"))
    for (const auto& b : s["allOf"])
      if (auto e = validate(v, b, root, at); !e.empty()) return e;
  if (s.contains("const") && v != s["const"]) return at + ": not the const";
  if (s.contains("enum")) {
    bool found = false;
    for (const auto& e : s["enum"]) found = found || e == v;
    if (!found) return at + ": not in the enum";
  }
  if (s.contains("type")) {
    auto is = [&](const std::string& t) {
      if (t == "null") return v.is_null();
      if (t == "boolean") return v.is_boolean();
      if (t == "integer") return v.is_number_integer();
      if (t == "number") return v.is_number();
      if (t == "string") return v.is_string();
      if (t == "array") return v.is_array();
      if (t == "object") return v.is_object();
      return false;
    };
    bool ok = false;
    if (s["type"].is_string()) ok = is(s["type"].get<std::string>());
    else
      for (const auto& t : s["type"]) ok = ok || is(t.get<std::string>());
    if (!ok) return at + ": wrong type for " + v.dump();
  }
  if (v.is_string()) {
    const std::string str = v.get<std::string>();
    const int64_t len = utf8_length(str);
    if (s.contains("minLength") && len < s["minLength"].get<int64_t>()) return at + ": too short";
    if (s.contains("maxLength") && len > s["maxLength"].get<int64_t>()) return at + ": too long";
    if (s.contains("pattern") && !std::regex_search(str, std::regex(s["pattern"].get<std::string>())))
      return at + ": " + v.dump() + " does not match the pattern";
    if (s.contains("format")) {
      static const std::map<std::string, std::string> formats = {
          {"date", R"(\d{4}-(0[1-9]|1[012])-(0[1-9]|[12]\d|3[01]))"},
          {"time", R"(([01]\d|2[0-3]):[0-5]\d:[0-5]\d(\.\d+)?(Z|[+-]([01]\d|2[0-3]):[0-5]\d))"},
          {"date-time", R"(\d{4}-(0[1-9]|1[012])-(0[1-9]|[12]\d|3[01])T([01]\d|2[0-3]):[0-5]\d:[0-5]\d(\.\d+)?(Z|[+-]([01]\d|2[0-3]):[0-5]\d))"},
          {"uuid", R"([0-9a-fA-F]{8}(-[0-9a-fA-F]{4}){3}-[0-9a-fA-F]{12})"},
          {"ipv4", R"(((25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)\.){3}(25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d))"},
          {"email", R"([^@\s]+@[^@\s]+\.[A-Za-z]+)"},
      };
      if (!std::regex_match(str, std::regex(formats.at(s["format"].get<std::string>()))))
        return at + ": " + v.dump() + " is not a " + s["format"].get<std::string>();
    }
  }
  if (v.is_array()) {
    if (s.contains("minItems") && int64_t(v.size()) < s["minItems"].get<int64_t>()) return at + ": too few items";
    if (s.contains("maxItems") && int64_t(v.size()) > s["maxItems"].get<int64_t>()) return at + ": too many items";
    if (s.contains("items"))
      for (size_t i = 0; i < v.size(); ++i)
        if (auto e = validate(v[i], s["items"], root, at + "/" + std::to_string(i)); !e.empty()) return e;
  }
  if (v.is_object()) {
    const json props = s.value("properties", json::object());
    if (s.contains("required"))
      for (const auto& r : s["required"])
        if (!v.contains(r.get<std::string>())) return at + ": missing " + r.get<std::string>();
    for (const auto& [k, x] : v.items()) {
      if (props.contains(k)) {
        if (auto e = validate(x, props[k], root, at + "/" + k); !e.empty()) return e;
      } else {
        const json extra = s.value("additionalProperties", json(true));
        if (extra.is_boolean() && !extra.get<bool>()) return at + ": unexpected property " + k;
        if (auto e = validate(x, extra, root, at + "/" + k); !e.empty()) return e;
      }
    }
  }
  return "";
}

}  // namespace dsv4::test
