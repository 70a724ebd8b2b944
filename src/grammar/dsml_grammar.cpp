#include "grammar/dsml_grammar.h"

#include <map>
#include <set>

namespace dsv4::grammar {

using json = nlohmann::ordered_json;

namespace {

const std::string kDsml = "｜DSML｜";

bool plain_string(const json& s) { return s.is_object() && s.value("type", json()) == "string"; }

Seq invoke(Grammar& g, const ToolSchema& t, const SchemaOptions& opt, const std::string& at) {
  const json params = t.parameters.is_null() ? json::object() : t.parameters;
  if (!params.is_object()) throw UnsupportedSchema(cat("unsupported tool schema at ", at, ": parameters must be an object"));
  for (const auto& [k, v] : params.items())
    if (k != "type" && k != "properties" && k != "required" && k != "additionalProperties" && k != "title" &&
        k != "description" && k != "$defs" && k != "definitions" && k != "$schema" && k != "strict")
      throw UnsupportedSchema(cat("unsupported JSON Schema feature at ", at, ": keyword '", k, "'"));
  if (auto ap = params.find("additionalProperties"); ap != params.end() && !(ap->is_boolean() && !ap->get<bool>()))
    throw UnsupportedSchema(cat("unsupported JSON Schema feature at ", at, ": additionalProperties in tool parameters"));
  const json props = params.value("properties", json::object());
  const json req = params.value("required", json::array());
  if (!props.is_object() || !req.is_array())
    throw UnsupportedSchema(cat("unsupported tool schema at ", at, ": properties must be an object, required an array"));
  std::set<std::string> required;
  for (const auto& r : req) {
    if (!r.is_string() || !props.contains(r.get<std::string>()))
      throw UnsupportedSchema(cat("unsupported tool schema at ", at, ": required names a property not in properties"));
    required.insert(r.get<std::string>());
  }
  SchemaCompiler c(g, params, opt);
  std::vector<std::pair<bool, Seq>> members;
  for (const auto& [k, v] : props.items()) {
    const std::string path = at + "/properties/" + k;
    const bool raw = plain_string(v);
    const Seq value = raw ? c.string_body(v, path, true) : c.value(v, path);
    members.emplace_back(required.count(k) > 0,
                         Grammar::lit("<" + kDsml + "parameter name=\"" + k + "\" string=\"" + (raw ? "true" : "false") +
                                      "\">") +
                             value + Grammar::lit("</" + kDsml + "parameter>"));
  }
  // As JSON Schema objects (json_schema.cpp): after = members from i on, one already written.
  const Seq nl = Grammar::lit("\n");
  Seq after, first;
  for (size_t i = members.size(); i-- > 0;) {
    const auto& [req, m] = members[i];
    const Seq with = m + after;
    first = g.alt({req ? with : g.alt({with, first}, "params")}, "params");
    after = g.alt({req ? nl + with : g.alt({nl + with, after}, "params")}, "params");
  }
  return Grammar::lit("<" + kDsml + "invoke name=\"" + t.name + "\">\n") + first +
         Grammar::lit("\n</" + kDsml + "invoke>");
}

// Any text in which kDsml does not occur: the marker's matching automaton (state k: the last bytes
// read are the marker's first k, and no more of it), one rule per state; every state may end.
Seq no_dsml_text(Grammar& g) {
  const std::string& m = kDsml;
  const size_t n = m.size();
  std::vector<uint32_t> state(n);
  for (size_t k = 0; k < n; ++k) state[k] = g.new_rule("text");
  for (size_t k = 0; k < n; ++k) {
    std::map<size_t, ByteSet> next;  // the state after a byte -> those bytes
    for (int b = 0; b < 256; ++b) {
      const std::string seen = m.substr(0, k) + char(b);
      size_t j = std::min(seen.size(), n);  // the longest suffix of `seen` that begins the marker
      while (j > 0 && seen.compare(seen.size() - j, j, m, 0, j) != 0) --j;
      if (j < n) next[j].set(size_t(b));  // j == n: the whole marker, refused
    }
    std::vector<Seq> alts{Seq{}};
    for (const auto& [j, bytes] : next) alts.push_back(Grammar::set(bytes) + Grammar::ref(state[j]));
    g.define(state[k], alts);
  }
  return Grammar::ref(state[0]);
}

// A non-strict tool's invoke: its name, then any well-formed parameters (a name without quotes or
// tags; string="true" and text without ｜DSML｜, or string="false" and any JSON value).
Seq free_invoke(Grammar& g, const ToolSchema& t, const Seq& text, SchemaCompiler& c) {
  ByteSet key_byte;
  key_byte.set();
  for (char ch : std::string("\"<>\n")) key_byte.reset(uint8_t(ch));
  const Seq key = Grammar::set(key_byte) + g.star(Grammar::set(key_byte));
  const Seq value = g.alt({Grammar::lit("true\">") + text, Grammar::lit("false\">") + c.any_value()}, "value");
  const Seq param = Grammar::lit("<" + kDsml + "parameter name=\"") + key + Grammar::lit("\" string=\"") + value +
                    Grammar::lit("</" + kDsml + "parameter>");
  const Seq params = g.opt(param + g.star(Grammar::lit("\n") + param));
  return Grammar::lit("<" + kDsml + "invoke name=\"" + t.name + "\">\n") + params +
         Grammar::lit("\n</" + kDsml + "invoke>");
}

Seq tool_calls_block(Grammar& g, const std::vector<Seq>& invokes, bool several) {
  const Seq one = g.alt(invokes, "invoke");
  const Seq calls = several ? one + g.star(Grammar::lit("\n") + one) : one;
  return Grammar::lit("\n\n<" + kDsml + "tool_calls>\n") + calls + Grammar::lit("\n</" + kDsml + "tool_calls>");
}

}  // namespace

Grammar dsml_auto_tools_grammar(const std::vector<ToolSchema>& tools, bool several, const SchemaOptions& opt) {
  if (tools.empty()) throw UnsupportedSchema("tool calls need at least one tool");
  Grammar g;
  const uint32_t root = g.new_rule("root");
  const Seq text = no_dsml_text(g);
  const json none;
  SchemaCompiler any(g, none, opt);
  std::vector<Seq> invokes;
  for (size_t i = 0; i < tools.size(); ++i)
    invokes.push_back(tools[i].strict ? invoke(g, tools[i], opt, cat("tools[", i, "].function.parameters"))
                                      : free_invoke(g, tools[i], text, any));
  g.define(root, {text + g.opt(tool_calls_block(g, invokes, several))});
  g.set_root(root);
  g.finish();
  return g;
}

Grammar dsml_tool_calls_grammar(const std::vector<ToolSchema>& tools, bool several, const SchemaOptions& opt) {
  if (tools.empty()) throw UnsupportedSchema("a forced tool call needs at least one tool");
  Grammar g;
  const uint32_t root = g.new_rule("root");
  std::vector<Seq> alts;
  for (size_t i = 0; i < tools.size(); ++i) alts.push_back(invoke(g, tools[i], opt, cat("tools[", i, "].function.parameters")));
  g.define(root, {tool_calls_block(g, alts, several)});
  g.set_root(root);
  g.finish();
  return g;
}

}  // namespace dsv4::grammar
