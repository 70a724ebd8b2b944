// The route table: every endpoint the server answers, with its handler. Handlers parse and validate,
// hand generation to the engine and return a Reply; they throw for errors (api_error.h).
#pragma once
#include <vector>

#include "server/context.h"
#include "server/reply.h"

namespace dsv4::server {

using Handler = Reply (*)(ServerContext& ctx, const ApiRequest& req);

struct Route {
  const char* method;   // GET | POST
  const char* pattern;  // a path; "(...)" captures ApiRequest::path_arg
  Handler handler;
  bool needs_key;       // behind --api-key (the /v1 API; /health, /metrics and the chat page stay open)
};

const std::vector<Route>& routes();

Reply handle_chat_completions(ServerContext& ctx, const ApiRequest& req);
Reply handle_completions(ServerContext& ctx, const ApiRequest& req);
Reply handle_models(ServerContext& ctx, const ApiRequest& req);
Reply handle_model(ServerContext& ctx, const ApiRequest& req);
Reply handle_health(ServerContext& ctx, const ApiRequest& req);
Reply handle_metrics(ServerContext& ctx, const ApiRequest& req);
Reply handle_webui_page(ServerContext& ctx, const ApiRequest& req);   // GET /: the chat page
Reply handle_webui_asset(ServerContext& ctx, const ApiRequest& req);  // GET /webui/NAME: its files

}  // namespace dsv4::server
