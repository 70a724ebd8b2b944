// POST /v1/completions: a prompt (a string, or token ids) continued as plain text; SSE text_completion
// chunks or one text_completion object, with legacy-form logprobs.
#include "core/error.h"
#include "server/api_error.h"
#include "server/generation_params.h"
#include "server/generation_reply.h"
#include "server/openai_format.h"
#include "server/routes.h"

namespace dsv4::server {
namespace {

class CompletionFormatter : public EventFormatter {
 public:
  CompletionFormatter(const Tokenizer& tok, std::string model, bool stream, bool include_usage, bool logprobs)
      : tok_(tok), model_(std::move(model)), stream_(stream), include_usage_(include_usage), logprobs_(logprobs),
        id_(new_id("cmpl-")), created_(unix_time()) {}

  std::string on_event(const EngineEvent& e) override {
    switch (e.kind) {
      case EngineEvent::Kind::Token: {
        if (e.has_logprobs) lp_.add(tok_, e.id, e.logprobs, int64_t(text_.size()));
        text_ += e.text;
        if (!stream_ || (e.text.empty() && lp_.empty())) return "";
        return sse_event(object(e.text, nullptr));
      }
      case EngineEvent::Kind::Finished: {
        text_ += e.text;
        const char* reason = finish_reason_name(e.finish);
        const Json usage = usage_json(e.prompt_tokens, e.completion_tokens, e.cached_tokens);
        Json last = object(stream_ ? e.text : text_, reason);
        if (!stream_) {
          last["usage"] = usage;
          return dump_json(last);
        }
        std::string out = sse_event(last);
        if (include_usage_) {  // OpenAI's rule: the usage once, in a last chunk with empty choices
          Json u = object("", nullptr);
          u["choices"] = Json::array();
          u["usage"] = usage;
          out += sse_event(u);
        }
        return out + kSseDone;
      }
      case EngineEvent::Kind::Failed: break;  // answered by the reply (generation_reply.h)
    }
    return "";
  }

 private:
  Json object(const std::string& text, Json finish_reason) {
    Json choice = {{"index", 0}, {"text", text}, {"logprobs", nullptr}, {"finish_reason", finish_reason}};
    if (logprobs_ && !lp_.empty()) choice["logprobs"] = lp_.take();
    Json o = {{"id", id_},
              {"object", "text_completion"},
              {"created", created_},
              {"model", model_},
              {"choices", Json::array({std::move(choice)})}};
    if (stream_ && include_usage_) o["usage"] = nullptr;  // every chunk but the usage one
    return o;
  }

  const Tokenizer& tok_;
  std::string model_;
  bool stream_, include_usage_, logprobs_;
  std::string id_;
  int64_t created_;
  std::string text_;
  CompletionLogprobs lp_;
};

}  // namespace

Reply handle_completions(ServerContext& ctx, const ApiRequest& req) {
  GenerationParams g = parse_completion_request(parse_body(req.body), ctx.parsing());
  const bool logprobs = g.req.top_logprobs >= 0;
  auto fmt = std::make_unique<CompletionFormatter>(ctx.tok, ctx.model_name, g.stream, g.include_usage, logprobs);
  return generation_reply(ctx, std::move(g.req), std::move(fmt), g.stream, "prompt");
}

}  // namespace dsv4::server
