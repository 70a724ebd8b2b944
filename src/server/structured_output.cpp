#include "server/structured_output.h"

#include "grammar/dsml_grammar.h"
#include "grammar/grammar_cache.h"
#include "server/api_error.h"

namespace dsv4::server {

namespace {

// The tools a forced call may use, or nullopt when the call is not forced.
std::optional<std::pair<std::vector<grammar::ToolSchema>, bool>> forced_tools(const Json& body) {
  auto choice = body.find("tool_choice");
  if (choice == body.end() || !body.contains("tools")) return std::nullopt;
  const bool required = choice->is_string() && *choice == "required";
  std::string named;
  if (choice->is_object()) named = (*choice)["function"]["name"].get<std::string>();
  if (!required && named.empty()) return std::nullopt;
  std::vector<grammar::ToolSchema> tools;
  for (const Json& t : body["tools"]) {
    const Json& fn = t["function"];
    if (!named.empty() && fn["name"] != named) continue;
    tools.push_back({fn["name"].get<std::string>(), fn.value("parameters", Json())});
  }
  // "required" allows several calls unless parallel_tool_calls is false; a named function is one call.
  auto parallel = body.find("parallel_tool_calls");
  const bool several = required && !(parallel != body.end() && parallel->is_boolean() && !parallel->get<bool>());
  return std::make_pair(std::move(tools), several);
}

// tool_choice "auto" (or absent) with a tool marked strict: every tool (each with its strict flag)
// and whether several calls may come; nullopt otherwise.
std::optional<std::pair<std::vector<grammar::ToolSchema>, bool>> strict_auto_tools(const Json& body) {
  auto tools = body.find("tools");
  if (tools == body.end() || !tools->is_array()) return std::nullopt;
  auto choice = body.find("tool_choice");
  if (choice != body.end() && !choice->is_null() && !(choice->is_string() && *choice == "auto")) return std::nullopt;
  std::vector<grammar::ToolSchema> out;
  bool any_strict = false;
  for (const Json& t : *tools) {
    const Json& fn = t["function"];
    auto strict = fn.find("strict");
    const bool is_strict = strict != fn.end() && strict->is_boolean() && strict->get<bool>();
    any_strict |= is_strict;
    out.push_back({fn["name"].get<std::string>(), fn.value("parameters", Json()), is_strict});
  }
  if (!any_strict) return std::nullopt;
  auto parallel = body.find("parallel_tool_calls");
  return std::make_pair(std::move(out), !(parallel != body.end() && parallel->is_boolean() && !parallel->get<bool>()));
}

bool has_response_format(const Json& body) {
  auto rf = body.find("response_format");
  return rf != body.end() && rf->is_object() && rf->value("type", "") != "text";
}

Json tools_key(const std::vector<grammar::ToolSchema>& tools) {
  Json key = Json::array();
  for (const auto& t : tools) key.push_back({t.name, t.strict, t.parameters});
  return key;
}

}  // namespace

GrammarConstraint output_grammar(const Json& body, const ParseContext& pc, chat::ThinkingMode mode) {
  GrammarConstraint g;
  std::string param = "response_format";
  try {
    if (auto forced = forced_tools(body)) {
      param = "tools";
      auto make = [&] { return grammar::dsml_tool_calls_grammar(forced->first, forced->second); };
      if (pc.grammars) g.grammar = pc.grammars->get(cat("dsml:", forced->second, tools_key(forced->first).dump()), make);
      else make();
    } else if (auto strict = has_response_format(body) ? std::nullopt : strict_auto_tools(body)) {
      param = "tools";
      auto make = [&] { return grammar::dsml_auto_tools_grammar(strict->first, strict->second); };
      if (pc.grammars) g.grammar = pc.grammars->get(cat("dsml-auto:", strict->second, tools_key(strict->first).dump()), make);
      else make();
    } else if (auto rf = body.find("response_format"); rf != body.end() && rf->is_object()) {
      const std::string type = rf->value("type", "");
      if (type == "json_object") {
        if (pc.grammars) g.grammar = pc.grammars->json_object();
      } else if (type == "json_schema") {
        param = "response_format.json_schema.schema";
        auto js = rf->find("json_schema");
        if (js == rf->end() || !js->is_object() || !js->contains("schema"))
          throw invalid_request("'response_format.json_schema.schema': required for type json_schema", param);
        if (pc.grammars) g.grammar = pc.grammars->json_schema((*js)["schema"]);
        else grammar::json_schema_grammar((*js)["schema"]);
      }
    }
  } catch (const grammar::UnsupportedSchema& e) {
    throw invalid_request(cat("'", param, "': ", e.what()), param);
  }
  if (g.grammar && mode == chat::ThinkingMode::Thinking)
    if (auto id = pc.tok.token_id("</think>")) g.start_after = *id;
  return g;
}

}  // namespace dsv4::server
