// The body of a generation request: the engine's events for it, formatted by the route (SSE chunks,
// or one JSON document at the end), as a ReplyStream the HTTP layer pulls from. Dropping or
// cancelling it cancels the request in the engine.
#pragma once
#include <memory>
#include <string>

#include "runtime/engine.h"
#include "server/api_error.h"
#include "server/context.h"
#include "server/reply.h"

namespace dsv4::server {

class EventFormatter {
 public:
  virtual ~EventFormatter() = default;
  virtual std::string start() { return ""; }  // sent first (a stream's role chunk)
  // Body bytes for a Token or Finished event (may be empty); Finished's complete the body. (Failed
  // events never reach the formatter: the reply answers them, below.)
  virtual std::string on_event(const EngineEvent& e) = 0;
};

// The error a failed generation answers: 503 shutting_down, 503 cancelled, 500 internal_error.
ApiError generation_error(const EngineEvent& failed);

// Submits `req` (a RequestRejected becomes an ApiError about `prompt_param`) and returns its reply:
// text/event-stream when `stream`, else application/json. A Failed event ends the body with
// generation_error(): in a stream as an error event then "data: [DONE]"; otherwise the body is that
// error alone and the stream's final_status() is its status (reply.h).
Reply generation_reply(ServerContext& ctx, GenerationRequest req, std::unique_ptr<EventFormatter> fmt, bool stream,
                       const std::string& prompt_param);

}  // namespace dsv4::server
