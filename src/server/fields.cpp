#include "server/fields.h"

#include <cmath>

#include "core/error.h"
#include "io/json_text.h"

namespace dsv4::server {

void check_json_depth(std::string_view text, const std::string& param) {
  const auto deep = json_text::find_too_deep(text);
  if (!deep) return;
  const std::string limit = cat("JSON nested deeper than ", json_text::kMaxJsonDepth, " levels of arrays and objects");
  if (param.empty()) {  // the body: name the member (a body that is no object has none)
    if (deep->path.empty() || deep->path[0] == '[') throw invalid_request("the body: " + limit);
    throw invalid_request(cat("'", deep->path, "': ", limit), deep->path);
  }
  // A string field holding JSON: the field is the param; the place inside it is told in the message.
  throw invalid_request(cat("'", param, "': ", limit, deep->path.empty() ? "" : " (at " + deep->path + ")"), param);
}

Json parse_body(std::string_view body) {
  check_json_depth(body, "");
  Json j;
  try {
    j = Json::parse(body);
  } catch (const Json::exception& e) {
    throw invalid_request(std::string("the body is not valid JSON: ") + json_text::printable(e.what(), 240));
  }
  if (!j.is_object()) throw invalid_request(std::string("the body must be a JSON object, not ") + j.type_name());
  return j;
}

Fields::Fields(const Json& obj, std::string path) : obj_(obj), path_(std::move(path)) {}

std::string Fields::path(std::string_view key) const {
  return path_.empty() ? std::string(key) : path_ + "." + std::string(key);
}

const Json* Fields::get(std::string_view key) const {
  auto it = obj_.find(key);
  return it == obj_.end() || it->is_null() ? nullptr : &*it;
}

bool Fields::has(std::string_view key) const { return get(key) != nullptr; }

void Fields::invalid(std::string_view key, const std::string& what) const {
  throw invalid_request(cat("'", path(key), "': ", what), path(key));
}

std::optional<bool> Fields::boolean(std::string_view key) const {
  const Json* v = get(key);
  if (!v) return std::nullopt;
  if (!v->is_boolean()) invalid(key, cat("expected a boolean, got ", v->type_name()));
  return v->get<bool>();
}

std::optional<int64_t> Fields::integer(std::string_view key, int64_t lo, int64_t hi) const {
  const Json* v = get(key);
  if (!v) return std::nullopt;
  int64_t x = 0;
  if (v->is_number_integer()) {
    if (v->is_number_unsigned() && v->get<uint64_t>() > uint64_t(INT64_MAX)) invalid(key, "the integer is too large");
    x = v->get<int64_t>();
  } else if (v->is_number_float() && std::isfinite(v->get<double>()) && v->get<double>() == std::floor(v->get<double>()) &&
             std::fabs(v->get<double>()) < 9e18) {
    x = int64_t(v->get<double>());  // 3.0 is an integer in JSON
  } else {
    invalid(key, cat("expected an integer, got ", v->is_number() ? v->dump() : v->type_name()));
  }
  if (x < lo || x > hi) invalid(key, cat(x, " is out of range [", lo, ", ", hi, "]"));
  return x;
}

std::optional<double> Fields::number(std::string_view key, double lo, double hi) const {
  const Json* v = get(key);
  if (!v) return std::nullopt;
  if (!v->is_number()) invalid(key, cat("expected a number, got ", v->type_name()));
  const double x = v->get<double>();
  if (!(x >= lo && x <= hi)) invalid(key, cat(v->dump(), " is out of range [", lo, ", ", hi, "]"));
  return x;
}

std::optional<std::string> Fields::string(std::string_view key) const {
  const Json* v = get(key);
  if (!v) return std::nullopt;
  if (!v->is_string()) invalid(key, cat("expected a string, got ", v->type_name()));
  return v->get<std::string>();
}

const Json* Fields::object(std::string_view key) const {
  const Json* v = get(key);
  if (v && !v->is_object()) invalid(key, cat("expected an object, got ", v->type_name()));
  return v;
}

const Json* Fields::array(std::string_view key) const {
  const Json* v = get(key);
  if (v && !v->is_array()) invalid(key, cat("expected an array, got ", v->type_name()));
  return v;
}

std::vector<std::string> Fields::strings(std::string_view key) const {
  const Json* v = get(key);
  if (!v) return {};
  if (v->is_string()) return {v->get<std::string>()};
  if (!v->is_array()) invalid(key, cat("expected a string or an array of strings, got ", v->type_name()));
  std::vector<std::string> out;
  for (const Json& s : *v) {
    if (!s.is_string()) invalid(key, cat("expected an array of strings, found a ", s.type_name()));
    out.push_back(s.get<std::string>());
  }
  return out;
}

}  // namespace dsv4::server
