#include "server/generation_reply.h"

#include "server/api_error.h"

namespace dsv4::server {
namespace {

class GenerationReply : public ReplyStream {
 public:
  GenerationReply(std::shared_ptr<RequestChannel> ch, std::unique_ptr<EventFormatter> fmt)
      : ch_(std::move(ch)), fmt_(std::move(fmt)) {}
  ~GenerationReply() override { ch_->cancel(); }

  bool next(std::string& out, std::chrono::milliseconds wait) override {
    if (!started_) {
      started_ = true;
      out += fmt_->start();
    }
    if (finished_) return false;
    for (const EngineEvent& e : ch_->wait(wait)) {
      out += fmt_->on_event(e);
      if (e.final()) finished_ = true;
    }
    return !finished_;
  }

  void cancel() override { ch_->cancel(); }

 private:
  std::shared_ptr<RequestChannel> ch_;
  std::unique_ptr<EventFormatter> fmt_;
  bool started_ = false, finished_ = false;
};

}  // namespace

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
  r.stream = std::make_shared<GenerationReply>(std::move(ch), std::move(fmt));
  return r;
}

}  // namespace dsv4::server
