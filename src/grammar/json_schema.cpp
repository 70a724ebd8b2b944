#include "grammar/json_schema.h"

#include <algorithm>
#include <optional>
#include <set>

#include "grammar/regex_grammar.h"

namespace dsv4::grammar {

using json = nlohmann::ordered_json;

namespace {

// Keywords that describe and never constrain.
const std::set<std::string> kAnnotations = {"title",      "description", "default",  "examples", "$schema",
                                            "$id",        "$comment",    "deprecated", "readOnly", "writeOnly",
                                            "$defs",      "definitions", "strict"};

const std::set<std::string> kTypes = {"null", "boolean", "integer", "number", "string", "array", "object"};

// The keywords each type understands (beyond type, enum, const and the annotations).
const std::map<std::string, std::set<std::string>> kTypeKeywords = {
    {"null", {}},
    {"boolean", {}},
    {"integer", {}},
    {"number", {}},
    {"string", {"minLength", "maxLength", "pattern", "format"}},
    {"array", {"items", "minItems", "maxItems"}},
    {"object", {"properties", "required", "additionalProperties"}},
};

// Regexes for the supported formats (ASCII, anchored).
const std::map<std::string, std::string> kFormats = {
    {"date", "^[0-9]{4}-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9]|3[01])$"},
    {"time", "^([01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](\\.[0-9]{1,6})?(Z|[+-]([01][0-9]|2[0-3]):[0-5][0-9])$"},
    {"date-time",
     "^[0-9]{4}-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9]|3[01])T([01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](\\.[0-9]{1,6})?"
     "(Z|[+-]([01][0-9]|2[0-3]):[0-5][0-9])$"},
    {"uuid", "^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$"},
    {"ipv4", "^(25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])(\\.(25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])){3}$"},
    {"email", "^[A-Za-z0-9._+-]{1,32}@[A-Za-z0-9-]{1,32}(\\.[A-Za-z0-9-]{1,32}){0,3}\\.[A-Za-z]{2,8}$"},
};

[[noreturn]] void unsupported(const std::string& path, const std::string& what) {
  throw UnsupportedSchema(cat("unsupported JSON Schema feature at ", path.empty() ? "/" : path, ": ", what));
}

int64_t count_of(const json& s, const char* key, const std::string& path, int64_t dflt) {
  auto it = s.find(key);
  if (it == s.end()) return dflt;
  if (!it->is_number_integer() || it->get<int64_t>() < 0)
    unsupported(path, cat(key, " must be a non-negative integer"));
  if (it->get<int64_t>() > 10000) unsupported(path, cat(key, " above 10000"));
  return it->get<int64_t>();
}

std::string escape_pointer(const std::string& k) {
  std::string out;
  for (char c : k) out += c == '~' ? "~0" : c == '/' ? "~1" : std::string(1, c);
  return out;
}

}  // namespace

SchemaCompiler::SchemaCompiler(Grammar& g, const json& root, SchemaOptions opt) : g_(g), root_(root), opt_(opt) {}

// Whitespace between tokens: nothing, one space or tab, or one newline and up to max_indent spaces or
// tabs (compact and pretty-printed JSON, but not the runs of blank lines a weak model drifts into).
Seq SchemaCompiler::ws() {
  auto it = shared_.find("ws");
  if (it != shared_.end()) return it->second;
  ByteSet indent;
  indent.set(' ');
  indent.set('\t');
  return shared_["ws"] = g_.alt({Seq{}, Grammar::set(indent), Grammar::lit("\n") + g_.repeat(Grammar::set(indent), 0, opt_.max_indent)},
                                "ws");
}

Seq SchemaCompiler::json_char() {
  auto it = shared_.find("json_char");
  if (it != shared_.end()) return it->second;
  ByteSet plain;
  for (int c = 0x20; c < 0x80; ++c)
    if (c != '"' && c != '\\' && c != 0x7F) plain.set(size_t(c));
  ByteSet simple_esc, hex, hex_no_d;
  for (char c : std::string("\"\\/bfnrt")) simple_esc.set(uint8_t(c));
  for (char c : std::string("0123456789abcdefABCDEF")) hex.set(uint8_t(c));
  hex_no_d = hex;
  hex_no_d.reset('d');
  hex_no_d.reset('D');
  ByteSet d_low;  // \uD000-\uD7FF: below the surrogates
  for (char c : std::string("01234567")) d_low.set(uint8_t(c));
  ByteSet dD;
  dD.set('d');
  dD.set('D');
  const Seq h = Grammar::set(hex);
  const Seq escape = g_.alt({Grammar::set(simple_esc), Grammar::lit("u") + Grammar::set(hex_no_d) + h + h + h,
                             Grammar::lit("u") + Grammar::set(dD) + Grammar::set(d_low) + h + h},
                            "escape");
  const Seq utf8 = utf8_any_rule(g_);
  shared_["utf8"] = utf8;
  return shared_["json_char"] = g_.alt({Grammar::set(plain), Grammar::lit("\\") + escape, utf8}, "json_char");
}

Seq SchemaCompiler::raw_char() {
  auto it = shared_.find("raw_char");
  if (it != shared_.end()) return it->second;
  ByteSet plain;
  for (int c = 0; c < 0x80; ++c)
    if (c != '<' && c != 0) plain.set(size_t(c));
  json_char();  // makes shared_["utf8"]
  return shared_["raw_char"] = g_.alt({Grammar::set(plain), shared_["utf8"]}, "raw_char");
}

Seq SchemaCompiler::string_body(const json& s, const std::string& path, bool raw) {
  const bool has_pattern = s.contains("pattern"), has_format = s.contains("format");
  const bool has_len = s.contains("minLength") || s.contains("maxLength");
  if (int(has_pattern) + int(has_format) + int(has_len) > 1)
    unsupported(path, "more than one of pattern, format and minLength/maxLength on one string");
  json_char();
  const CharContext cx{g_, shared_["utf8"], raw};
  if (has_pattern) {
    if (!s["pattern"].is_string()) unsupported(path, "pattern must be a string");
    return regex_grammar(cx, s["pattern"].get<std::string>(), path + "/pattern");
  }
  if (has_format) {
    const std::string f = s["format"].is_string() ? s["format"].get<std::string>() : "";
    auto it = kFormats.find(f);
    if (it == kFormats.end()) unsupported(path, "format '" + f + "'");
    return regex_grammar(cx, it->second, path + "/format");
  }
  const int64_t lo = count_of(s, "minLength", path, 0), hi = count_of(s, "maxLength", path, -1);
  if (hi >= 0 && hi < lo) unsupported(path, "maxLength below minLength");
  const Seq c = raw ? raw_char() : json_char();
  if (lo == 0 && hi < 0) {
    const std::string key = raw ? "raw_chars" : "json_chars";
    auto it = shared_.find(key);
    if (it != shared_.end()) return it->second;
    return shared_[key] = g_.star(c);
  }
  return g_.repeat(c, lo, hi);
}

Seq SchemaCompiler::number(bool integer) {
  const std::string key = integer ? "integer" : "number";
  auto it = shared_.find(key);
  if (it != shared_.end()) return it->second;
  ByteSet digit, nonzero, e, sign;
  for (char c = '0'; c <= '9'; ++c) digit.set(uint8_t(c));
  nonzero = digit;
  nonzero.reset('0');
  e.set('e');
  e.set('E');
  sign.set('+');
  sign.set('-');
  const Seq d = Grammar::set(digit);
  const Seq int_part = g_.alt({Grammar::lit("0"), Grammar::set(nonzero) + g_.repeat(d, 0, opt_.max_int_digits - 1)},
                              "int_part");
  Seq body = g_.opt(Grammar::lit("-")) + int_part;
  if (!integer)
    body += g_.opt(Grammar::lit(".") + g_.repeat(d, 1, opt_.max_frac_digits)) +
            g_.opt(Grammar::set(e) + g_.opt(Grammar::set(sign)) + g_.repeat(d, 1, 3));
  return shared_[key] = Seq(g_.alt({body}, key));
}

Seq SchemaCompiler::any_value() {
  auto it = shared_.find("any");
  if (it != shared_.end()) return it->second;
  const uint32_t r = g_.new_rule("any");
  shared_["any"] = Grammar::ref(r);
  const Seq w = ws();
  const Seq str = quoted(string_body(json::object(), "", false));
  const Seq member = str + w + Grammar::lit(":") + w + Grammar::ref(r);
  const Seq obj = g_.alt({Grammar::lit("{") + w + Grammar::lit("}"),
                          Grammar::lit("{") + w + member + g_.star(w + Grammar::lit(",") + w + member) + w + Grammar::lit("}")},
                         "any_object");
  shared_["any_object"] = obj;
  const Seq arr = g_.alt({Grammar::lit("[") + w + Grammar::lit("]"),
                          Grammar::lit("[") + w + Grammar::ref(r) + g_.star(w + Grammar::lit(",") + w + Grammar::ref(r)) + w +
                              Grammar::lit("]")},
                         "any_array");
  g_.define(r, {obj, arr, str, number(false), Grammar::lit("true"), Grammar::lit("false"), Grammar::lit("null")});
  return shared_["any"];
}

Seq SchemaCompiler::any_object() {
  any_value();
  return shared_["any_object"];
}

const json& SchemaCompiler::resolve(const std::string& ref, const std::string& path) {
  if (ref.empty() || ref[0] != '#') unsupported(path, "$ref '" + ref + "' (only references inside the document, '#...')");
  try {
    return root_.at(json::json_pointer(ref.substr(1)));
  } catch (const json::exception&) {
    unsupported(path, "$ref '" + ref + "' points nowhere");
  }
}

Seq SchemaCompiler::value(const json& s, const std::string& path) {
  // Nesting is bounded so that a hostile schema cannot exhaust the stack.
  struct Depth {
    int& d;
    explicit Depth(int& x) : d(++x) {}
    ~Depth() { --d; }
  } depth(depth_);
  if (depth_ > 64) unsupported(path, "nesting deeper than 64 schemas");
  if (s.is_boolean()) {
    if (!s.get<bool>()) unsupported(path, "the schema false (nothing can match it)");
    return any_value();
  }
  if (!s.is_object()) unsupported(path, "a schema must be an object or a boolean");
  if (auto r = s.find("$ref"); r != s.end()) {
    for (const auto& [k, v] : s.items())
      if (k != "$ref" && !kAnnotations.count(k)) unsupported(path, "keyword '" + k + "' beside $ref");
    if (!r->is_string()) unsupported(path, "$ref must be a string");
    const std::string ref = r->get<std::string>();
    auto it = refs_.find(ref);
    if (it != refs_.end()) return Grammar::ref(it->second);
    const uint32_t rule = g_.new_rule("ref " + ref);
    refs_[ref] = rule;
    g_.define(rule, {value(resolve(ref, path), ref.substr(1))});
    return Grammar::ref(rule);
  }
  for (const char* comb : {"anyOf", "oneOf"})
    if (auto it = s.find(comb); it != s.end()) {
      for (const auto& [k, v] : s.items())
        if (k != comb && !kAnnotations.count(k)) unsupported(path, cat("keyword '", k, "' beside ", comb));
      if (!it->is_array() || it->empty()) unsupported(path, cat(comb, " must be a non-empty array"));
      std::vector<Seq> alts;
      for (size_t i = 0; i < it->size(); ++i) alts.push_back(value((*it)[i], cat(path, "/", comb, "/", i)));
      return g_.alt(alts, comb);
    }
  if (auto it = s.find("allOf"); it != s.end()) {
    if (!it->is_array() || it->size() != 1 || s.size() != 1) unsupported(path, "allOf (only allOf with one schema)");
    return value((*it)[0], path + "/allOf/0");
  }
  // enum / const: the values' JSON texts.
  for (const char* lit : {"enum", "const"})
    if (auto it = s.find(lit); it != s.end()) {
      const json values = std::string(lit) == "const" ? json::array({*it}) : *it;
      if (!values.is_array() || values.empty()) unsupported(path, "enum must be a non-empty array");
      for (const auto& [k, v] : s.items())
        if (k != lit && k != "type" && !kAnnotations.count(k)) unsupported(path, cat("keyword '", k, "' beside ", lit));
      std::vector<Seq> alts;
      for (const auto& v : values) alts.push_back(Grammar::lit(v.dump()));
      return g_.alt(alts, lit);
    }
  std::vector<std::string> types;
  if (auto it = s.find("type"); it != s.end()) {
    if (it->is_string()) types.push_back(it->get<std::string>());
    else if (it->is_array())
      for (const auto& t : *it) types.push_back(t.is_string() ? t.get<std::string>() : "?");
    else unsupported(path, "type must be a string or an array of strings");
    if (types.empty()) unsupported(path, "an empty type list");
  } else {
    // No type: what the keywords imply, else any value.
    for (const auto& [t, keys] : kTypeKeywords)
      for (const auto& k : keys)
        if (s.contains(k) && std::find(types.begin(), types.end(), t) == types.end()) types.push_back(t);
    if (types.empty()) {
      for (const auto& [k, v] : s.items())
        if (!kAnnotations.count(k)) unsupported(path, "keyword '" + k + "'");
      return any_value();
    }
  }
  for (const auto& item : s.items()) {
    const std::string& k = item.key();  // not a structured binding: clang 14 cannot capture those
    if (k == "type" || kAnnotations.count(k)) continue;
    const bool known = std::any_of(types.begin(), types.end(), [&](const std::string& t) {
      auto tk = kTypeKeywords.find(t);
      return tk != kTypeKeywords.end() && tk->second.count(k);
    });
    if (!known) unsupported(path, "keyword '" + k + "'");
  }
  std::vector<Seq> alts;
  for (const auto& t : types) {
    if (!kTypes.count(t)) unsupported(path, "type '" + t + "'");
    alts.push_back(typed(s, t, path));
  }
  return g_.alt(alts, "types");
}

Seq SchemaCompiler::typed(const json& s, const std::string& t, const std::string& path) {
  if (t == "null") return Grammar::lit("null");
  if (t == "boolean") return g_.alt({Grammar::lit("true"), Grammar::lit("false")}, "boolean");
  if (t == "integer") return number(true);
  if (t == "number") return number(false);
  if (t == "string") {
    const bool plain = !s.contains("pattern") && !s.contains("format") && !s.contains("minLength") && !s.contains("maxLength");
    if (plain) {
      auto it = shared_.find("string");
      if (it != shared_.end()) return it->second;
      return shared_["string"] = Seq(g_.alt({quoted(string_body(s, path, false))}, "string"));
    }
    return quoted(string_body(s, path, false));
  }
  if (t == "array") return array(s, path);
  return object(s, path);
}

Seq SchemaCompiler::array(const json& s, const std::string& path) {
  const int64_t lo = count_of(s, "minItems", path, 0), hi = count_of(s, "maxItems", path, -1);
  if (hi >= 0 && hi < lo) unsupported(path, "maxItems below minItems");
  const Seq item = s.contains("items") ? Seq(g_.alt({value(s["items"], path + "/items")}, "item")) : any_value();
  const Seq w = ws();
  std::vector<Seq> alts;
  if (lo == 0) alts.push_back(Grammar::lit("[") + w + Grammar::lit("]"));
  if (hi != 0) {
    const Seq more = g_.repeat(w + Grammar::lit(",") + w + item, std::max<int64_t>(0, lo - 1), hi < 0 ? -1 : hi - 1);
    alts.push_back(Grammar::lit("[") + w + item + more + w + Grammar::lit("]"));
  }
  return g_.alt(alts, "array");
}

Seq SchemaCompiler::object(const json& s, const std::string& path) {
  const json props = s.value("properties", json::object());
  if (!props.is_object()) unsupported(path, "properties must be an object");
  std::set<std::string> required;
  if (auto it = s.find("required"); it != s.end()) {
    if (!it->is_array()) unsupported(path, "required must be an array");
    for (const auto& r : *it) {
      if (!r.is_string()) unsupported(path, "required must hold strings");
      if (!props.contains(r.get<std::string>()))
        unsupported(path, "required property '" + r.get<std::string>() + "' missing from properties");
      required.insert(r.get<std::string>());
    }
  }
  const Seq w = ws();
  // Extra members: additionalProperties absent or false = none (strict mode), true / a schema = any key.
  std::optional<Seq> extra;
  if (auto it = s.find("additionalProperties"); it != s.end() && !(it->is_boolean() && !it->get<bool>())) {
    const Seq key = quoted(string_body(json::object(), path, false));
    extra = key + w + Grammar::lit(":") + w + value(*it, path + "/additionalProperties");
  }
  // Members in schema order. after[i]: the members from i on, some member already written (each
  // starts with ","); first[i]: the same with none written yet.
  std::vector<std::pair<std::string, Seq>> members;
  for (const auto& [k, v] : props.items())
    members.emplace_back(k, Grammar::lit(json(k).dump()) + w + Grammar::lit(":") + w +
                                value(v, path + "/properties/" + escape_pointer(k)));
  const size_t n = members.size();
  const Seq comma = w + Grammar::lit(",") + w;
  Seq after = extra ? g_.star(comma + *extra) : Seq{};
  Seq first = extra ? g_.opt(*extra + g_.star(comma + *extra)) : Seq{};
  for (size_t i = n; i-- > 0;) {
    const Seq& m = members[i].second;
    const bool req = required.count(members[i].first) > 0;
    const Seq with = m + after;
    const Seq new_first = req ? with : g_.alt({with, first}, "members");
    after = req ? comma + with : g_.alt({comma + with, after}, "members");
    first = g_.alt({new_first}, "members");
    after = g_.alt({after}, "members");
  }
  return g_.alt({Grammar::lit("{") + w + first + w + Grammar::lit("}")}, "object");
}

Grammar json_schema_grammar(const json& schema, const SchemaOptions& opt) {
  Grammar g;
  const uint32_t root = g.new_rule("root");
  SchemaCompiler c(g, schema, opt);
  const Seq w = c.ws();
  g.define(root, {w + c.value(schema, "") + w});
  g.set_root(root);
  try {
    g.finish();
  } catch (const UnsupportedSchema&) {
    throw;
  } catch (const Error& e) {  // e.g. a $ref cycle that consumes nothing
    throw UnsupportedSchema(cat("unsupported JSON Schema: ", e.what()));
  }
  return g;
}

Grammar json_object_grammar(const SchemaOptions& opt) {
  Grammar g;
  const uint32_t root = g.new_rule("root");
  const json none = json::object();
  SchemaCompiler c(g, none, opt);
  const Seq w = c.ws();
  g.define(root, {w + c.any_object() + w});
  g.set_root(root);
  return g;
}

}  // namespace dsv4::grammar
