#include "chat/dsml.h"

#include "chat/py_json.h"
#include "chat/templates.h"
#include "core/error.h"
#include "io/json_text.h"

namespace dsv4::chat {

using nlohmann::ordered_json;

std::string encode_arguments_to_dsml(const ordered_json& arguments) {
  ordered_json args;
  bool parsed = false;
  if (arguments.is_string()) {
    const std::string& text = arguments.get_ref<const std::string&>();
    if (json_text::find_too_deep(text))
      fail("tool call arguments: JSON nested deeper than ", json_text::kMaxJsonDepth, " levels of arrays and objects");
    try {
      args = ordered_json::parse(text);
      parsed = true;
    } catch (const ordered_json::exception&) {
    }
  }
  if (!parsed) args = ordered_json{{"arguments", arguments}};
  if (!args.is_object())
    fail("tool call arguments must be a JSON object, got ", json_text::printable(arguments.get<std::string>(), 80));

  std::string out;
  bool first = true;
  for (const auto& [key, v] : args.items()) {
    if (!first) out += '\n';
    first = false;
    const bool is_str = v.is_string();
    out += "<｜DSML｜parameter name=\"";
    out += key;
    out += "\" string=\"";
    out += is_str ? "true" : "false";
    out += "\">";
    out += is_str ? v.get<std::string>() : py_dumps(v);
    out += "</｜DSML｜parameter>";
  }
  return out;
}

std::string render_tool_calls(const ordered_json& tool_calls) {
  std::string out = "\n\n";
  out += kToolCallsOpen;
  out += '\n';
  for (size_t i = 0; i < tool_calls.size(); ++i) {
    const ordered_json& tc = tool_calls[i];
    if (!tc.is_object() || !tc.contains("function") || !tc["function"].is_object())
      fail("tool_calls[", i, "]: expected {\"function\": {\"name\": ..., \"arguments\": ...}}");
    const ordered_json& fn = tc["function"];
    if (!fn.contains("name")) fail("tool_calls[", i, "].function: missing \"name\"");
    if (!fn.contains("arguments")) fail("tool_calls[", i, "].function: missing \"arguments\"");
    if (i > 0) out += '\n';
    out += "<｜DSML｜invoke name=\"";
    out += py_str(fn["name"]);
    out += "\">\n";
    out += encode_arguments_to_dsml(fn["arguments"]);
    out += "\n</｜DSML｜invoke>";
  }
  out += '\n';
  out += kToolCallsClose;
  return out;
}

std::string dsml_argument_prefix(const std::string& name, bool is_string, bool first) {
  std::string out = first ? "" : ", ";
  out += py_dumps_string(name);
  out += ": ";
  if (is_string) out += '"';
  return out;
}

std::string decode_dsml_arguments(const std::vector<DsmlParam>& params) {
  std::string out = "{";
  for (size_t i = 0; i < params.size(); ++i) {
    const DsmlParam& p = params[i];
    out += dsml_argument_prefix(p.name, p.is_string, i == 0);
    if (p.is_string)
      py_escape_append(out, p.value);
    else
      out += p.value;
    out += dsml_argument_suffix(p.is_string);
  }
  out += '}';
  return out;
}

}  // namespace dsv4::chat
