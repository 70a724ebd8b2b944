// The routes that do not generate: the route table itself, /health, /v1/models, /metrics (the chat
// page's routes are in webui_routes.cpp).
#include "core/error.h"
#include "server/api_error.h"
#include "server/routes.h"

namespace dsv4::server {

const std::vector<Route>& routes() {
  static const std::vector<Route> table = {
      {"POST", "/v1/chat/completions", handle_chat_completions, true},
      {"POST", "/v1/completions", handle_completions, true},
      {"GET", "/v1/models", handle_models, true},
      {"GET", "/v1/models/(.+)", handle_model, true},
      {"GET", "/health", handle_health, false},
      {"GET", "/metrics", handle_metrics, false},
      {"GET", "/", handle_webui_page, false},
      {"GET", "/webui/([A-Za-z0-9_.-]+)", handle_webui_asset, false},
  };
  return table;
}

namespace {

Json model_json(const ServerContext& ctx) {
  return {{"id", ctx.model_name},
          {"object", "model"},
          {"created", ctx.created},
          {"owned_by", "dsv4"},
          {"max_model_len", ctx.engine.max_context()}};
}

}  // namespace

Reply handle_models(ServerContext& ctx, const ApiRequest&) {
  return Reply::json({{"object", "list"}, {"data", Json::array({model_json(ctx)})}});
}

Reply handle_model(ServerContext& ctx, const ApiRequest& req) {
  if (req.path_arg != ctx.model_name)
    throw ApiError(404, cat("the model '", req.path_arg, "' does not exist"), "model", "model_not_found");
  return Reply::json(model_json(ctx));
}

Reply handle_health(ServerContext& ctx, const ApiRequest&) {
  if (ctx.draining) return Reply::json({{"status", "shutting_down"}}, 503);
  return Reply::json({{"status", "ok"}});
}

Reply handle_metrics(ServerContext& ctx, const ApiRequest&) {
  Reply r;
  r.content_type = "text/plain; version=0.0.4";
  r.body = render_metrics(ctx.engine.stats(), ctx.http.snapshot(), ctx.http.active_streams(), ctx.model_name);
  return r;
}

}  // namespace dsv4::server
