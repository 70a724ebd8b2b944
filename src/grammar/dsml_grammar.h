// The DSML tool-call block (FORMATS.md §7.1) as a grammar: what a forced tool call (tool_choice
// "required" or a named function) must produce, each call's parameters constrained by its tool's
// JSON Schema:
//   "\n\n<｜DSML｜tool_calls>\n" invoke ("\n" invoke)* "\n</｜DSML｜tool_calls>"
//   invoke = "<｜DSML｜invoke name=\"NAME\">\n" params joined by "\n" "\n</｜DSML｜invoke>"
//   param  = "<｜DSML｜parameter name=\"K\" string=\"true|false\">" V "</｜DSML｜parameter>"
// A parameter whose schema is a plain string type is written raw (string="true", no '<' inside);
// any other is JSON (string="false") under its schema. Parameters come in schema order, required ones
// always, and no others (additionalProperties must be absent or false).
#pragma once
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "grammar/json_schema.h"

namespace dsv4::grammar {

struct ToolSchema {
  std::string name;
  nlohmann::ordered_json parameters;  // an object schema (null/absent: no parameters)
};

// `several`: one or more calls (tool_choice "required"); else exactly one. Throws UnsupportedSchema.
Grammar dsml_tool_calls_grammar(const std::vector<ToolSchema>& tools, bool several, const SchemaOptions& opt = {});

}  // namespace dsv4::grammar
