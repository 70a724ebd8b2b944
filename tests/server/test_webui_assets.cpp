// The chat page compiled into the binary: every served file of src/server/webui is embedded byte for
// byte under its name, with a content type by extension; nothing else is.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "server/webui_assets.h"
#include "support/test_paths.h"

namespace dsv4::server {
namespace {

std::string read_file(const std::filesystem::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

TEST(WebuiAssets, EveryServedFileIsEmbeddedExactly) {
  const std::filesystem::path dir = std::filesystem::path(test::source_dir()) / "src/server/webui";
  std::set<std::string> on_disk;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    const std::string name = e.path().filename().string();
    if (webui_content_type(name).empty()) continue;  // embed.cmake, not served
    on_disk.insert(name);
    const WebAsset* a = find_webui_asset(name);
    ASSERT_NE(a, nullptr) << name;
    EXPECT_EQ(a->bytes, read_file(e.path())) << name;
  }
  EXPECT_TRUE(on_disk.count("index.html") && on_disk.count("app.js"));
  std::set<std::string> embedded;
  for (const WebAsset& a : webui_assets()) embedded.insert(std::string(a.name));
  EXPECT_EQ(embedded, on_disk);
}

TEST(WebuiAssets, ContentTypesAndUnknownNames) {
  EXPECT_EQ(webui_content_type("index.html"), "text/html; charset=utf-8");
  EXPECT_EQ(webui_content_type("app.js"), "text/javascript; charset=utf-8");
  EXPECT_EQ(webui_content_type("style.css"), "text/css; charset=utf-8");
  EXPECT_EQ(webui_content_type("embed.cmake"), "");
  EXPECT_EQ(webui_content_type("js"), "");
  EXPECT_EQ(find_webui_asset("embed.cmake"), nullptr);
  EXPECT_EQ(find_webui_asset("../CMakeLists.txt"), nullptr);
  EXPECT_EQ(find_webui_asset(""), nullptr);
}

}  // namespace
}  // namespace dsv4::server
