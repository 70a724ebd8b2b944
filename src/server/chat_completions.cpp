#include "server/chat_completions.h"

#include "server/api_error.h"
#include "server/chat_request.h"
#include "server/chat_stream.h"
#include "server/openai_format.h"
#include "server/routes.h"

namespace dsv4::server {
namespace {

class ChatFormatter : public EventFormatter {
 public:
  ChatFormatter(const Tokenizer& tok, ChatReplyOptions o)
      : tok_(tok), o_(std::move(o)), turn_(o_.mode), id_(new_id("chatcmpl-")), created_(unix_time()) {}

  std::string start() override {
    return o_.stream ? sse_event(chunk({{"role", "assistant"}, {"content", ""}})) : std::string();
  }

  std::string on_event(const EngineEvent& e) override {
    switch (e.kind) {
      case EngineEvent::Kind::Token:
        if (e.has_logprobs) logprobs_.push_back(chat_logprob(tok_, e.id, e.logprobs));
        return deltas(turn_.push(e.text));
      case EngineEvent::Kind::Finished: return finished(e);
      case EngineEvent::Kind::Failed: break;  // answered by the reply (generation_reply.h)
    }
    return "";
  }

 private:
  // A stream chunk. OpenAI's usage rule: with include_usage every chunk has "usage": null but the
  // last, which has empty choices and the usage; without it no chunk has a usage field.
  Json envelope(Json choices) {
    Json c = {{"id", id_},
              {"object", "chat.completion.chunk"},
              {"created", created_},
              {"model", o_.model},
              {"choices", std::move(choices)}};
    if (o_.include_usage) c["usage"] = nullptr;
    return c;
  }

  Json chunk(Json delta, Json finish_reason = nullptr) {
    Json choice = {{"index", 0}, {"delta", std::move(delta)}, {"logprobs", nullptr}, {"finish_reason", finish_reason}};
    if (!logprobs_.empty() && o_.logprobs) choice["logprobs"] = {{"content", take_logprobs()}};
    return envelope(Json::array({std::move(choice)}));
  }

  Json take_logprobs() {
    Json lp = std::move(logprobs_);
    logprobs_ = Json::array();
    return lp;
  }

  const std::string& call_id(int index) {
    while (int(call_ids_.size()) <= index) call_ids_.push_back(new_id("call_"));
    return call_ids_[size_t(index)];
  }

  // SSE chunks for the deltas; consecutive text deltas of one kind share a chunk.
  std::string deltas(const std::vector<ChatDelta>& ds) {
    std::string out;
    for (size_t i = 0; i < ds.size(); ++i) {
      const ChatDelta& d = ds[i];
      Json delta;
      switch (d.kind) {
        case ChatDelta::Kind::Reasoning:
        case ChatDelta::Kind::Content: {
          std::string text = d.text;
          while (i + 1 < ds.size() && ds[i + 1].kind == d.kind) text += ds[++i].text;
          delta[d.kind == ChatDelta::Kind::Reasoning ? "reasoning_content" : "content"] = std::move(text);
          break;
        }
        case ChatDelta::Kind::ToolCallStart:
          delta["tool_calls"] = Json::array({{{"index", d.tool_index},
                                              {"id", call_id(d.tool_index)},
                                              {"type", "function"},
                                              {"function", {{"name", d.text}, {"arguments", ""}}}}});
          break;
        case ChatDelta::Kind::ToolCallArguments: {
          std::string args = d.text;
          while (i + 1 < ds.size() && ds[i + 1].kind == d.kind && ds[i + 1].tool_index == d.tool_index)
            args += ds[++i].text;
          delta["tool_calls"] = Json::array({{{"index", d.tool_index}, {"function", {{"arguments", std::move(args)}}}}});
          break;
        }
      }
      if (o_.stream) out += sse_event(chunk(std::move(delta)));
    }
    return out;
  }

  std::string finished(const EngineEvent& e) {
    std::string out = deltas(turn_.push(e.text));
    out += deltas(turn_.finish(e.stop_id >= 0 ? tok_.token_bytes(e.stop_id) : std::string()));
    const char* reason = turn_.called_tools() ? "tool_calls" : finish_reason_name(e.finish);
    const Json usage = usage_json(e.prompt_tokens, e.completion_tokens, e.cached_tokens);
    if (o_.stream) {
      out += sse_event(chunk(Json::object(), reason));
      if (o_.include_usage) {
        Json last = envelope(Json::array());
        last["usage"] = usage;
        out += sse_event(last);
      }
      return out + kSseDone;
    }
    const chat::ParsedMessage& m = turn_.message();
    Json msg = {{"role", "assistant"}, {"content", m.content}};
    if (m.content.empty() && !m.tool_calls.empty()) msg["content"] = nullptr;
    if (o_.mode == chat::ThinkingMode::Thinking) msg["reasoning_content"] = m.reasoning_content;
    if (!m.tool_calls.empty()) {
      Json calls = Json::array();
      for (size_t i = 0; i < m.tool_calls.size(); ++i)
        calls.push_back({{"id", call_id(int(i))},
                         {"type", "function"},
                         {"function", {{"name", m.tool_calls[i].name}, {"arguments", m.tool_calls[i].arguments}}}});
      msg["tool_calls"] = std::move(calls);
    }
    Json choice = {{"index", 0}, {"message", std::move(msg)}, {"logprobs", nullptr}, {"finish_reason", reason}};
    if (o_.logprobs) choice["logprobs"] = {{"content", take_logprobs()}};
    return dump_json({{"id", id_},
                      {"object", "chat.completion"},
                      {"created", created_},
                      {"model", o_.model},
                      {"choices", Json::array({std::move(choice)})},
                      {"usage", usage}});
  }

  const Tokenizer& tok_;
  ChatReplyOptions o_;
  ChatTurnBuilder turn_;
  std::string id_;
  int64_t created_;
  Json logprobs_ = Json::array();  // entries not yet sent
  std::vector<std::string> call_ids_;
};

}  // namespace

std::unique_ptr<EventFormatter> chat_formatter(const Tokenizer& tok, ChatReplyOptions o) {
  return std::make_unique<ChatFormatter>(tok, std::move(o));
}

Reply handle_chat_completions(ServerContext& ctx, const ApiRequest& req) {
  ChatRequest c = parse_chat_request(parse_body(req.body), ctx.parsing());
  ChatReplyOptions o;
  o.model = ctx.model_name;
  o.mode = c.mode;
  o.stream = c.gen.stream;
  o.include_usage = c.gen.include_usage;
  o.logprobs = c.gen.req.top_logprobs >= 0;
  return generation_reply(ctx, std::move(c.gen.req), chat_formatter(ctx.tok, std::move(o)), c.gen.stream, "messages");
}

}  // namespace dsv4::server
