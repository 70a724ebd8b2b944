// Typed, validated reading of a request's JSON fields. A missing or null field is absent; a field of
// the wrong type or out of range is an ApiError 400 naming it (param = its path, e.g.
// "messages[2].content").
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "server/api_error.h"

namespace dsv4::server {

// The request body as a JSON object (document order kept); 400 when it is not one, is malformed, or
// nests arrays and objects deeper than json_text::kMaxJsonDepth (param: the member that does).
Json parse_body(std::string_view body);

// 400 when `text` nests deeper than json_text::kMaxJsonDepth. `param` "": `text` is the body, and
// the error's param is the member that crosses the limit (e.g. "tools[0].function.parameters.a");
// else `text` is the value of the string field `param` (JSON inside a string, e.g. tool-call
// arguments), which is the error's param.
void check_json_depth(std::string_view text, const std::string& param);

class Fields {
 public:
  explicit Fields(const Json& obj, std::string path = "");

  const Json& json() const { return obj_; }
  std::string path(std::string_view key) const;  // the param name of a field
  bool has(std::string_view key) const;          // present and not null
  const Json* get(std::string_view key) const;   // nullptr when absent or null

  std::optional<bool> boolean(std::string_view key) const;
  std::optional<int64_t> integer(std::string_view key, int64_t lo, int64_t hi) const;
  std::optional<double> number(std::string_view key, double lo, double hi) const;
  std::optional<std::string> string(std::string_view key) const;
  const Json* object(std::string_view key) const;  // nullptr when absent
  const Json* array(std::string_view key) const;   // nullptr when absent
  // A string or an array of strings (e.g. "stop").
  std::vector<std::string> strings(std::string_view key) const;

  [[noreturn]] void invalid(std::string_view key, const std::string& what) const;

 private:
  const Json& obj_;
  std::string path_;
};

}  // namespace dsv4::server
