#include "server/generation_reply.h"

#include "server/api_error.h"
#include "server/openai_format.h"

namespace dsv4::server {
namespace {

class GenerationReply : public ReplyStream {
 public:
  GenerationReply(std::shared_ptr<RequestChannel> ch, std::unique_ptr<EventFormatter> fmt, bool stream)
      : ch_(std::move(ch)), fmt_(std::move(fmt)), stream_(stream) {}
  ~GenerationReply() override { ch_->cancel(); }

  bool next(std::string& out, std::chrono::milliseconds wait) override {
    if (!started_) {
      started_ = true;
      out += fmt_->start();
    }
    if (finished_) return false;
    for (const EngineEvent& e : ch_->wait(wait)) {
      if (e.kind == EngineEvent::Kind::Failed) {
        const ApiError err = generation_error(e);
        if (stream_) {  // its head (200) went out with the first chunk: the end tells why
          out += sse_event(error_json(err)) + kSseDone;
        } else {  // a whole body has had nothing yet (formatters write it at Finished)
          status_ = err.status;
          out = dump_json(error_json(err));
        }
      } else {
        out += fmt_->on_event(e);
      }
      if (e.final()) finished_ = true;
    }
    return !finished_;
  }

  void cancel() override { ch_->cancel(); }
  int final_status() const override { return status_; }

 private:
  std::shared_ptr<RequestChannel> ch_;
  std::unique_ptr<EventFormatter> fmt_;
  bool stream_;
  bool started_ = false, finished_ = false;
  int status_ = 0;  // 0: Reply::status (200); a failed whole body's 5xx
};

}  // namespace

ApiError generation_error(const EngineEvent& e) {
  using F = EngineEvent::FailReason;
  switch (e.fail_reason) {
    case F::ShuttingDown: return ApiError(503, e.text, "", "shutting_down");
    case F::Cancelled: return ApiError(503, "the request was cancelled", "", "cancelled");
    case F::Internal: break;
  }
  return ApiError(500, "generation failed: " + e.text, "", "internal_error");
}

Reply generation_reply(ServerContext& ctx, GenerationRequest req, std::unique_ptr<EventFormatter> fmt, bool stream,
                       const std::string& prompt_param) {
  std::shared_ptr<RequestChannel> ch;
  try {
    ch = ctx.engine.submit(std::move(req));
  } catch (const RequestRejected&) {
    throw to_api_error(std::current_exception(), prompt_param);
  }
  Reply r;
  r.content_type = stream ? "text/event-stream" : "application/json";
  r.stream = std::make_shared<GenerationReply>(std::move(ch), std::move(fmt), stream);
  return r;
}

}  // namespace dsv4::server
