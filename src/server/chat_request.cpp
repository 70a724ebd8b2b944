#include "server/chat_request.h"

#include "core/error.h"
#include "server/structured_output.h"

namespace dsv4::server {
namespace {

const char* const kRoles[] = {"system", "user", "assistant", "tool", "developer"};

// Content as the encoder takes it: a string ("" for null); text parts are joined with "\n".
std::string content_text(const Fields& m) {
  const Json* c = m.get("content");
  if (!c) return "";
  if (c->is_string()) return c->get<std::string>();
  if (!c->is_array()) m.invalid("content", cat("expected a string or an array of content parts, got ", c->type_name()));
  std::string text;
  for (size_t j = 0; j < c->size(); ++j) {
    const Json& part = (*c)[j];
    const std::string at = cat("content[", j, "]");
    if (!part.is_object()) m.invalid(at, "expected a content part object");
    Fields p(part, m.path(at));
    if (p.string("type").value_or("") != "text") p.invalid("type", "only text content parts are supported");
    std::optional<std::string> t = p.string("text");
    if (!t) p.invalid("text", "missing");
    if (j > 0) text += '\n';
    text += *t;
  }
  return text;
}

Json tool_calls_of(const Fields& m) {
  const Json* calls = m.array("tool_calls");
  Json out = Json::array();
  if (!calls) return out;
  for (size_t j = 0; j < calls->size(); ++j) {
    const std::string at = cat("tool_calls[", j, "]");
    if (!(*calls)[j].is_object()) m.invalid(at, "expected an object");
    Fields c((*calls)[j], m.path(at));
    if (auto type = c.string("type"); type && *type != "function") c.invalid("type", "expected \"function\"");
    const Json* fn = c.object("function");
    if (!fn) c.invalid("function", "missing");
    Fields ff(*fn, c.path("function"));
    std::optional<std::string> name = ff.string("name");
    if (!name || name->empty()) ff.invalid("name", "missing");
    std::string args = "{}";
    if (const Json* a = ff.get("arguments")) {
      if (a->is_string()) {
        args = a->get<std::string>();
        check_json_depth(args, ff.path("arguments"));  // the encoder parses it (FORMATS.md §10.13)
      } else if (a->is_object()) {
        args = a->dump();  // the V4 encoder wants a JSON string (FORMATS.md §10.13)
      } else {
        ff.invalid("arguments", "expected a JSON string or an object");
      }
    }
    Json call = {{"type", "function"}, {"function", {{"name", *name}, {"arguments", args}}}};
    if (auto id = c.string("id")) call["id"] = *id;
    out.push_back(std::move(call));
  }
  return out;
}

Json normalize_message(const Json& msg, size_t i) {
  const std::string at = cat("messages[", i, "]");
  if (!msg.is_object()) throw invalid_request(cat("'", at, "': expected a message object"), at);
  Fields m(msg, at);
  std::optional<std::string> role = m.string("role");
  if (!role) m.invalid("role", "missing");
  if (std::find(std::begin(kRoles), std::end(kRoles), *role) == std::end(kRoles))
    m.invalid("role", cat("unknown role \"", *role, "\" (expected system, user, assistant, tool or developer)"));
  Json out = {{"role", *role}, {"content", content_text(m)}};
  if (*role == "assistant") {
    if (auto r = m.string("reasoning_content")) out["reasoning_content"] = *r;
    Json calls = tool_calls_of(m);
    if (!calls.empty()) out["tool_calls"] = std::move(calls);
  } else if (*role == "tool") {
    if (auto id = m.string("tool_call_id")) out["tool_call_id"] = *id;
  } else if (*role == "developer" && out["content"].get_ref<const std::string&>().empty()) {
    m.invalid("content", "a developer message needs content");
  }
  return out;
}

// The tools to render, after tool_choice.
Json selected_tools(const Fields& f) {
  const Json* tools = f.array("tools");
  Json out = Json::array();
  if (tools) {
    for (size_t i = 0; i < tools->size(); ++i) {
      const std::string at = cat("tools[", i, "]");
      if (!(*tools)[i].is_object()) f.invalid(at, "expected a tool object");
      Fields t((*tools)[i], f.path(at));
      if (auto type = t.string("type"); type && *type != "function") t.invalid("type", "expected \"function\"");
      const Json* fn = t.object("function");
      if (!fn) t.invalid("function", "missing");
      Fields ff(*fn, t.path("function"));
      if (!ff.string("name")) ff.invalid("name", "missing");
      ff.string("description");
      ff.object("parameters");
      out.push_back((*tools)[i]);
    }
  }
  const Json* choice = f.get("tool_choice");
  if (!choice) return out;
  if (choice->is_string()) {
    const std::string c = choice->get<std::string>();
    if (c == "none") return Json::array();
    if (c != "auto" && c != "required") f.invalid("tool_choice", "expected none, auto, required or a named function");
    if (c == "required" && out.empty()) f.invalid("tool_choice", "\"required\" needs tools");
    return out;
  }
  if (!choice->is_object()) f.invalid("tool_choice", "expected a string or an object");
  Fields c(*choice, f.path("tool_choice"));
  const Json* fn = c.object("function");
  std::optional<std::string> name = fn ? Fields(*fn, c.path("function")).string("name") : std::nullopt;
  if (!name) c.invalid("function", "expected {\"type\": \"function\", \"function\": {\"name\": ...}}");
  for (const Json& t : out)
    if (t["function"]["name"] == *name) return Json::array({t});
  c.invalid("function", cat("no tool named \"", *name, "\""));
}

}  // namespace

Json chat_messages(const Fields& f) {
  const Json* ms = f.array("messages");
  if (!ms) f.invalid("messages", "required");
  if (ms->empty()) f.invalid("messages", "must not be empty");
  Json doc = {{"messages", Json::array()}};
  for (size_t i = 0; i < ms->size(); ++i) doc["messages"].push_back(normalize_message((*ms)[i], i));
  Json tools = selected_tools(f);
  if (!tools.empty()) doc["tools"] = std::move(tools);
  if (const Json* rf = f.object("response_format")) {
    std::optional<std::string> type = Fields(*rf, "response_format").string("type");
    if (!type || (*type != "text" && *type != "json_object" && *type != "json_schema"))
      f.invalid("response_format", "type must be text, json_object or json_schema");
    if (*type != "text") doc["response_format"] = *rf;
  }
  return chat::messages_from_document(doc);
}

chat::EncodeOptions chat_encode_options(const Fields& f) {
  std::optional<bool> thinking;
  std::optional<std::string> effort = f.string("reasoning_effort");
  std::string effort_param = "reasoning_effort";
  if (const Json* kw = f.object("chat_template_kwargs")) {
    Fields k(*kw, f.path("chat_template_kwargs"));
    thinking = k.boolean("thinking");
    if (!thinking) thinking = k.boolean("enable_thinking");
    if (auto e = k.string("reasoning_effort")) {
      effort = e;
      effort_param = k.path("reasoning_effort");
    }
  }
  chat::EncodeOptions eo;
  if (effort) {
    const std::string& e = *effort;
    if (e == "high")
      eo.reasoning_effort = chat::ReasoningEffort::High;
    else if (e == "max" || e == "xhigh")
      eo.reasoning_effort = chat::ReasoningEffort::Max;
    else if (e != "none" && e != "minimal" && e != "low" && e != "medium")
      throw invalid_request(cat("'", effort_param, "': expected none, minimal, low, medium, high, xhigh or max"),
                            effort_param);
  }
  const bool on = thinking.value_or(effort.has_value() && *effort != "none");
  eo.thinking_mode = on ? chat::ThinkingMode::Thinking : chat::ThinkingMode::Chat;
  return eo;
}

std::string render_chat_prompt(const Json& body) {
  Fields f(body);
  Json messages = chat_messages(f);
  chat::EncodeOptions eo = chat_encode_options(f);
  try {
    return chat::encode_messages(messages, eo);
  } catch (const Error& e) {
    throw invalid_request(e.what(), "messages");
  }
}

ChatRequest parse_chat_request(const Json& body, const ParseContext& pc) {
  Fields f(body);
  ChatRequest r;
  r.gen = parse_generation_params(f, pc, Endpoint::Chat);
  r.mode = chat_encode_options(f).thinking_mode;
  r.prompt = render_chat_prompt(body);
  r.gen.req.prompt = pc.tok.encode(r.prompt);
  r.gen.req.sampling.grammar = output_grammar(body, pc, r.mode);
  return r;
}

}  // namespace dsv4::server
