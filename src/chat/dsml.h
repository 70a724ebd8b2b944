// DSML tool-call markup (encoding_dsv4.py): rendering an assistant's tool calls into the prompt, and
// rebuilding a call's `arguments` JSON string from parsed parameters.
#pragma once
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace dsv4::chat {

// One parsed parameter: name, raw value text, and whether it was marked string="true".
struct DsmlParam {
  std::string name;
  std::string value;
  bool is_string = false;
};

// The parameter lines of one invoke. `arguments` is the OpenAI-style JSON *string*; as in the
// reference, a value that is not a string, or a string that is not JSON, is rendered as a single
// parameter named "arguments". A JSON string that decodes to something other than an object is an
// error (the reference fails there too).
std::string encode_arguments_to_dsml(const nlohmann::ordered_json& arguments);

// "\n\n<｜DSML｜tool_calls>\n" + invokes + "\n</｜DSML｜tool_calls>" for OpenAI-format tool calls
// ([{"function": {"name": ..., "arguments": ...}}, ...]).
std::string render_tool_calls(const nlohmann::ordered_json& tool_calls);

// '{"k": v, ...}': string values JSON-quoted, others inserted raw, in parameter order.
std::string decode_dsml_arguments(const std::vector<DsmlParam>& params);

// Pieces of decode_dsml_arguments for streaming: the text before a parameter's value (including the
// opening '"' for strings) and after it. Joined: "{" + before(0) + value + after + ... + "}".
std::string dsml_argument_prefix(const std::string& name, bool is_string, bool first);
inline std::string dsml_argument_suffix(bool is_string) { return is_string ? "\"" : ""; }

}  // namespace dsv4::chat
