// The body of a generation request: the engine's events for it, formatted by the route (SSE chunks,
// or one JSON document at the end), as a ReplyStream the HTTP layer pulls from. Dropping or
// cancelling it cancels the request in the engine.
#pragma once
#include <memory>
#include <string>

#include "runtime/engine.h"
#include "server/context.h"
#include "server/reply.h"

namespace dsv4::server {

class EventFormatter {
 public:
  virtual ~EventFormatter() = default;
  virtual std::string start() { return ""; }  // sent first (a stream's role chunk)
  // Body bytes for an event (may be empty). The final event's bytes complete the body.
  virtual std::string on_event(const EngineEvent& e) = 0;
};

// Submits `req` (a RequestRejected becomes an ApiError about `prompt_param`) and returns its reply:
// text/event-stream when `stream`, else application/json.
Reply generation_reply(ServerContext& ctx, GenerationRequest req, std::unique_ptr<EventFormatter> fmt, bool stream,
                       const std::string& prompt_param);

}  // namespace dsv4::server
