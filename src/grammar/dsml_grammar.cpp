#include "grammar/dsml_grammar.h"

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

}  // namespace

Grammar dsml_tool_calls_grammar(const std::vector<ToolSchema>& tools, bool several, const SchemaOptions& opt) {
  if (tools.empty()) throw UnsupportedSchema("a forced tool call needs at least one tool");
  Grammar g;
  const uint32_t root = g.new_rule("root");
  std::vector<Seq> alts;
  for (size_t i = 0; i < tools.size(); ++i) alts.push_back(invoke(g, tools[i], opt, cat("tools[", i, "].function.parameters")));
  const Seq one = g.alt(alts, "invoke");
  const Seq calls = several ? one + g.star(Grammar::lit("\n") + one) : one;
  g.define(root, {Grammar::lit("\n\n<" + kDsml + "tool_calls>\n") + calls + Grammar::lit("\n</" + kDsml + "tool_calls>")});
  g.set_root(root);
  g.finish();
  return g;
}

}  // namespace dsv4::grammar
