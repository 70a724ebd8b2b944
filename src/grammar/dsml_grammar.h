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
  bool strict = true;                 // dsml_auto_tools_grammar: parameters under the schema (else free)
};

// `several`: one or more calls (tool_choice "required"); else exactly one. Throws UnsupportedSchema.
Grammar dsml_tool_calls_grammar(const std::vector<ToolSchema>& tools, bool several, const SchemaOptions& opt = {});

// tool_choice "auto" with strict tools: the model answers freely or calls. The content is any text
// without "｜DSML｜" (the chat parser ends content at the tool-call block and refuses DSML text in it),
// then optionally the tool-call block above (after its "\n\n"), in which a strict tool's parameters
// follow its schema and any other tool's are free: `<｜DSML｜parameter name="K" string="true|false">`
// text without ｜DSML｜ `</｜DSML｜parameter>`, joined by "\n". Throws UnsupportedSchema.
Grammar dsml_auto_tools_grammar(const std::vector<ToolSchema>& tools, bool several, const SchemaOptions& opt = {});

}  // namespace dsv4::grammar
