// The chat page's files (src/server/webui/), embedded in the binary at build time by
// src/server/webui/embed.cmake, and the routes that serve them: GET / (index.html) and GET /webui/NAME.
#pragma once
#include <string_view>
#include <vector>

namespace dsv4::server {

struct WebAsset {
  std::string_view name;   // the file's name in src/server/webui/, e.g. "app.js"
  std::string_view bytes;  // its exact content
};

// Every embedded file (generated code).
const std::vector<WebAsset>& webui_assets();

// The asset called `name`, or nullptr.
const WebAsset* find_webui_asset(std::string_view name);

// The Content-Type for a file name, by its extension (text types in UTF-8); "" for an unknown one.
std::string_view webui_content_type(std::string_view name);

}  // namespace dsv4::server
