#include "support/test_paths.h"

#include <cstdlib>
#include <filesystem>

namespace dsv4::test {

std::string shared_dir() {
  if (const char* env = std::getenv("DSV4_SHARED"); env && *env) return env;
  return DSV4_SHARED_DIR;
}
std::string fixture_dir(const std::string& name) { return shared_dir() + "/fixtures/" + name; }
std::string source_dir() {
  if (const char* env = std::getenv("DSV4_SOURCE_DIR"); env && *env) return env;
  return DSV4_SOURCE_DIR;
}
std::string bundled_model_dir() { return source_dir() + "/models/tiny-shakespeare"; }
std::string dsv4_binary() { return DSV4_BINARY; }
bool have_shared() { return std::filesystem::exists(shared_dir() + "/fixtures"); }

}  // namespace dsv4::test
