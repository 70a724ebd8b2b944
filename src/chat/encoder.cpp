#include "chat/encoder.h"

#include <algorithm>
#include <map>

#include "chat/dsml.h"
#include "chat/py_json.h"
#include "chat/templates.h"
#include "core/error.h"
#include "io/json_text.h"

namespace dsv4::chat {
namespace {

using nlohmann::ordered_json;
using Messages = std::vector<ordered_json>;

// Python's msg.get(key) / msg.get(key, default). By value: the default is often a temporary.
ordered_json get(const ordered_json& obj, const char* key, const ordered_json& dflt = nullptr) {
  if (obj.is_object()) {
    auto it = obj.find(key);
    if (it != obj.end()) return *it;
  }
  return dflt;
}

std::string role_of(const ordered_json& m) {
  auto it = m.is_object() ? m.find("role") : m.end();
  return it != m.end() && it->is_string() ? it->get<std::string>() : "";
}

// `value or ""` formatted into a template.
std::string text_or_empty(const ordered_json& v, const char* what) {
  if (!py_truthy(v)) return "";
  if (v.is_array() || v.is_object()) fail(what, ": expected a string, got a JSON ", v.type_name());
  return py_str(v);
}

// A value that Python concatenates or joins as a str (anything else is a TypeError there).
const std::string& require_string(const ordered_json& v, const std::string& what) {
  if (!v.is_string()) fail(what, ": expected a string, got ", v.is_null() ? "null" : v.type_name());
  return v.get_ref<const std::string&>();
}

int find_last_user_index(const Messages& ms) {
  for (int i = int(ms.size()) - 1; i >= 0; --i) {
    std::string r = role_of(ms[size_t(i)]);
    if (r == "user" || r == "developer") return i;
  }
  return -1;
}

std::string render_tools(const ordered_json& tools) {
  std::string out(kToolsHead);
  for (size_t i = 0; i < tools.size(); ++i) {
    const ordered_json& t = tools[i];
    if (!t.is_object() || !t.contains("function")) fail("tools[", i, "]: expected {\"type\": \"function\", \"function\": {...}}");
    if (i > 0) out += '\n';
    out += py_dumps(t["function"]);
  }
  out += kToolsTail;
  return out;
}

std::string render_response_format(const ordered_json& rf) { return "\n\n" + std::string(kResponseFormatHeader) + py_dumps(rf); }

std::string render_user_blocks(const ordered_json& blocks) {
  std::string out;
  for (size_t i = 0; i < blocks.size(); ++i) {
    const ordered_json& b = blocks[i];
    if (i > 0) out += "\n\n";
    const ordered_json& type = get(b, "type");
    if (type == "text") {
      out += require_string(get(b, "text", ""), "user message content");
    } else if (type == "tool_result") {
      const ordered_json& c = get(b, "content", "");
      std::string text;
      if (c.is_array()) {
        for (size_t k = 0; k < c.size(); ++k) {
          if (k > 0) text += "\n\n";
          const ordered_json& part = c[k];
          if (get(part, "type") == "text")
            text += require_string(get(part, "text", ""), "tool result text");
          else
            text += "[Unsupported " + py_str(get(part, "type")) + "]";
        }
      } else {
        if (c.is_object()) fail("tool message content: expected a string or a list of parts");
        text = py_str(c);
      }
      out += "<tool_result>" + text + "</tool_result>";
    } else {
      out += "[Unsupported " + py_str(type) + "]";
    }
  }
  return out;
}

std::string render_message(size_t index, const Messages& ms, ThinkingMode mode, bool drop_thinking,
                           ReasoningEffort effort) {
  const bool thinking = mode == ThinkingMode::Thinking;
  const ordered_json& msg = ms[index];
  if (!msg.is_object()) fail("message ", index, ": expected a JSON object");
  const int last_user = find_last_user_index(ms);
  const std::string role = role_of(msg);
  const ordered_json& content = get(msg, "content");
  const ordered_json& tools = get(msg, "tools");
  const ordered_json& response_format = get(msg, "response_format");

  std::string prompt;
  if (index == 0 && thinking && effort == ReasoningEffort::Max) prompt += kReasoningEffortMax;

  if (role == "system") {
    prompt += text_or_empty(content, "system message content");
    if (py_truthy(tools)) prompt += "\n\n" + render_tools(tools);
    if (py_truthy(response_format)) prompt += render_response_format(response_format);
  } else if (role == "developer") {
    if (!py_truthy(content)) fail("message ", index, ": a developer message needs non-empty content");
    prompt += kUser;
    prompt += require_string(content, "developer message content");
    if (py_truthy(tools)) prompt += "\n\n" + render_tools(tools);
    if (py_truthy(response_format)) prompt += render_response_format(response_format);
  } else if (role == "user") {
    prompt += kUser;
    const ordered_json& blocks = get(msg, "content_blocks");
    if (py_truthy(blocks))
      prompt += render_user_blocks(blocks);
    else
      prompt += text_or_empty(content, "user message content");
  } else if (role == "latest_reminder") {
    prompt += kLatestReminder;
    if (content.is_array() || content.is_object()) fail("latest_reminder content: expected a string");
    prompt += py_str(content);
  } else if (role == "assistant") {
    std::string tool_calls;
    if (py_truthy(get(msg, "tool_calls"))) tool_calls = render_tool_calls(get(msg, "tool_calls"));
    std::string reasoning;
    const bool prev_has_task = index >= 1 && !get(ms[index - 1], "task").is_null();
    if (thinking && !prev_has_task && (!drop_thinking || int(index) > last_user))
      reasoning = text_or_empty(get(msg, "reasoning_content"), "reasoning_content") + std::string(kThinkEnd);
    prompt += reasoning + text_or_empty(content, "assistant message content") + tool_calls;
    if (!py_truthy(get(msg, "wo_eos", false))) prompt += kEos;
  } else if (role == "tool") {
    fail("message ", index, ": tool messages must be merged into user turns first");
  } else {
    fail("message ", index, ": unknown role ", get(msg, "role").dump());
  }

  // What follows decides the transition: nothing more when the next turn is not the assistant's.
  if (index + 1 < ms.size()) {
    std::string next = role_of(ms[index + 1]);
    if (next != "assistant" && next != "latest_reminder") return prompt;
  }
  const ordered_json& task = get(msg, "task");
  if (!task.is_null()) {
    static const std::map<std::string, std::string_view> kTasks = {
        {"action", "<｜action｜>"}, {"query", "<｜query｜>"}, {"authority", "<｜authority｜>"},
        {"domain", "<｜domain｜>"}, {"title", "<｜title｜>"},  {"read_url", "<｜read_url｜>"}};
    auto it = task.is_string() ? kTasks.find(task.get<std::string>()) : kTasks.end();
    if (it == kTasks.end())
      fail("message ", index, ": invalid task ", task.dump(), " (valid: action, query, authority, domain, title, read_url)");
    if (it->first == "action") {
      prompt += kAssistant;
      prompt += thinking ? kThinkStart : kThinkEnd;
    }
    prompt += it->second;
  } else if (role == "user" || role == "developer") {
    prompt += kAssistant;
    bool open = thinking && (!drop_thinking || int(index) >= last_user);
    prompt += open ? kThinkStart : kThinkEnd;
  }
  return prompt;
}

// Tool messages become tool_result blocks of a user message; consecutive user turns share one.
Messages merge_tool_messages(const Messages& in) {
  Messages merged;
  for (const ordered_json& msg : in) {
    const std::string role = role_of(msg);
    auto last_is_merged_user = [&] {
      return !merged.empty() && role_of(merged.back()) == "user" && merged.back().contains("content_blocks");
    };
    if (role == "tool") {
      ordered_json block = {{"type", "tool_result"},
                            {"tool_use_id", get(msg, "tool_call_id", "")},
                            {"content", get(msg, "content", "")}};
      if (last_is_merged_user())
        merged.back()["content_blocks"].push_back(std::move(block));
      else
        merged.push_back({{"role", "user"}, {"content_blocks", ordered_json::array({std::move(block)})}});
    } else if (role == "user") {
      ordered_json text = {{"type", "text"}, {"text", get(msg, "content", "")}};
      if (last_is_merged_user() && get(merged.back(), "task").is_null()) {
        merged.back()["content_blocks"].push_back(std::move(text));
      } else {
        ordered_json m = {{"role", "user"}, {"content", get(msg, "content", "")},
                          {"content_blocks", ordered_json::array({std::move(text)})}};
        for (const char* key : {"task", "wo_eos", "mask"})
          if (msg.contains(key)) m[key] = msg[key];
        merged.push_back(std::move(m));
      }
    } else {
      merged.push_back(msg);
    }
  }
  return merged;
}

// Orders each user turn's tool_result blocks by the ids of the preceding assistant's tool calls
// (stable; unknown ids count as position 0), keeping other blocks where they are.
void sort_tool_results_by_call_order(Messages& ms) {
  std::map<std::string, int> order;  // py_dumps(id) -> position
  for (ordered_json& msg : ms) {
    const std::string role = role_of(msg);
    if (role == "assistant" && py_truthy(get(msg, "tool_calls"))) {
      order.clear();
      const ordered_json& calls = msg["tool_calls"];
      for (size_t i = 0; i < calls.size(); ++i) {
        ordered_json id = get(calls[i], "id");
        if (!py_truthy(id)) id = get(get(calls[i], "function", ordered_json::object()), "id", "");
        if (py_truthy(id)) order[py_dumps(id)] = int(i);
      }
    } else if (role == "user" && py_truthy(get(msg, "content_blocks"))) {
      ordered_json& blocks = msg["content_blocks"];
      std::vector<ordered_json> results;
      for (const auto& b : blocks)
        if (get(b, "type") == "tool_result") results.push_back(b);
      if (results.size() <= 1 || order.empty()) continue;
      std::stable_sort(results.begin(), results.end(), [&](const ordered_json& a, const ordered_json& b) {
        auto pos = [&](const ordered_json& x) {
          auto it = order.find(py_dumps(get(x, "tool_use_id", "")));
          return it == order.end() ? 0 : it->second;
        };
        return pos(a) < pos(b);
      });
      size_t k = 0;
      for (auto& b : blocks)
        if (get(b, "type") == "tool_result") b = results[k++];
    }
  }
}

// Before the last user turn: assistants lose their reasoning, developer (and unknown) turns go.
Messages drop_thinking_messages(const Messages& ms) {
  const int last_user = find_last_user_index(ms);
  Messages out;
  for (size_t i = 0; i < ms.size(); ++i) {
    const std::string role = role_of(ms[i]);
    if (role == "user" || role == "system" || role == "tool" || role == "latest_reminder" ||
        role == "direct_search_results" || int(i) >= last_user) {
      out.push_back(ms[i]);
    } else if (role == "assistant") {
      ordered_json m = ms[i];
      m.erase("reasoning_content");
      out.push_back(std::move(m));
    }
  }
  return out;
}

std::string encode_messages_impl(const ordered_json& messages_json, const EncodeOptions& opt);

Messages as_list(const ordered_json& v, const char* what) {
  if (v.is_null()) return {};
  if (!v.is_array()) fail(what, ": expected a JSON array of messages");
  Messages out(v.begin(), v.end());
  for (size_t i = 0; i < out.size(); ++i)
    if (!out[i].is_object()) fail(what, "[", i, "]: expected a JSON object");
  return out;
}

}  // namespace

std::string encode_messages(const ordered_json& messages_json, const EncodeOptions& opt) {
  try {
    return encode_messages_impl(messages_json, opt);
  } catch (const ordered_json::exception& e) {
    fail("malformed messages: ", e.what());
  }
}

namespace {

std::string encode_messages_impl(const ordered_json& messages_json, const EncodeOptions& opt) {
  Messages context = as_list(opt.context, "context");
  Messages messages = merge_tool_messages(as_list(messages_json, "messages"));
  {
    Messages all = context;
    all.insert(all.end(), messages.begin(), messages.end());
    sort_tool_results_by_call_order(all);
    messages.assign(all.begin() + std::ptrdiff_t(context.size()), all.end());
  }
  if (!context.empty()) {
    context = merge_tool_messages(context);
    sort_tool_results_by_call_order(context);
  }
  Messages full = context;
  full.insert(full.end(), messages.begin(), messages.end());

  std::string prompt = opt.add_bos && context.empty() ? std::string(kBos) : std::string();
  bool drop = opt.drop_thinking;
  for (const auto& m : full)
    if (py_truthy(get(m, "tools"))) drop = false;

  size_t count = messages.size(), offset = context.size();
  if (opt.thinking_mode == ThinkingMode::Thinking && drop) {
    full = drop_thinking_messages(full);
    count = full.size() - drop_thinking_messages(context).size();
    offset = full.size() - count;
  }
  for (size_t i = 0; i < count; ++i)
    prompt += render_message(i + offset, full, opt.thinking_mode, drop, opt.reasoning_effort);
  return prompt;
}

}  // namespace

ThinkingMode parse_thinking_mode(std::string_view s) {
  if (s == "chat") return ThinkingMode::Chat;
  if (s == "thinking") return ThinkingMode::Thinking;
  fail("invalid thinking_mode \"", s, "\" (expected chat or thinking)");
}

ReasoningEffort parse_reasoning_effort(const ordered_json& v) {
  if (v.is_null()) return ReasoningEffort::None;
  if (v == "high") return ReasoningEffort::High;
  if (v == "max") return ReasoningEffort::Max;
  fail("invalid reasoning effort ", v.dump(), " (expected high, max or null)");
}

ordered_json messages_from_document(const ordered_json& doc) {
  if (doc.is_array()) return doc;
  if (!doc.is_object() || !doc.contains("messages") || !doc["messages"].is_array())
    fail("expected a JSON array of messages or an object with a \"messages\" array");
  ordered_json messages = doc["messages"];
  for (const char* key : {"tools", "response_format"}) {
    if (!py_truthy(get(doc, key))) continue;
    std::string first = messages.empty() ? "" : role_of(messages[0]);
    if (first != "system" && first != "developer")
      messages.insert(messages.begin(), ordered_json{{"role", "system"}, {"content", ""}});
    messages[0][key] = doc[key];
  }
  return messages;
}

ordered_json parse_json_document(std::string_view text, const std::string& what) {
  if (auto deep = json_text::find_too_deep(text))
    fail(what, ": JSON nested deeper than ", json_text::kMaxJsonDepth, " levels of arrays and objects (at ",
         deep->path.empty() ? "the top" : deep->path, ")");
  try {
    return ordered_json::parse(text);
  } catch (const ordered_json::exception& e) {
    fail(what, ": malformed JSON: ", e.what());
  }
}

}  // namespace dsv4::chat
