// The chat page: GET / answers index.html and GET /webui/NAME its scripts and styles, from the files
// embedded at build time (webui_assets.h). Open without the API key: the page itself asks for the key
// when a /v1 call answers 401. `dsv4 serve --no-webui` turns both routes into 404s.
#include "server/webui_assets.h"

#include "core/error.h"
#include "server/api_error.h"
#include "server/routes.h"

namespace dsv4::server {

const WebAsset* find_webui_asset(std::string_view name) {
  for (const WebAsset& a : webui_assets())
    if (a.name == name) return &a;
  return nullptr;
}

std::string_view webui_content_type(std::string_view name) {
  static constexpr std::pair<std::string_view, std::string_view> types[] = {
      {".html", "text/html; charset=utf-8"},
      {".js", "text/javascript; charset=utf-8"},
      {".css", "text/css; charset=utf-8"},
      {".svg", "image/svg+xml"},
  };
  for (const auto& [ext, type] : types)
    if (name.ends_with(ext)) return type;
  return "";
}

namespace {

Reply asset_reply(const ServerContext& ctx, std::string_view name, std::string_view path) {
  if (!ctx.webui) throw ApiError(404, cat("unknown route: GET ", path, " (the chat page is off: --no-webui)"));
  const WebAsset* a = find_webui_asset(name);
  const std::string_view type = webui_content_type(name);
  if (!a || type.empty()) throw ApiError(404, cat("unknown route: GET ", path));
  Reply r;
  r.content_type = std::string(type);
  r.body = std::string(a->bytes);
  return r;
}

}  // namespace

Reply handle_webui_page(ServerContext& ctx, const ApiRequest&) { return asset_reply(ctx, "index.html", "/"); }

Reply handle_webui_asset(ServerContext& ctx, const ApiRequest& req) {
  return asset_reply(ctx, req.path_arg, cat("/webui/", req.path_arg));
}

}  // namespace dsv4::server
