// The layers of the code (docs/architecture.md) as a test: every #include "x/..." in src/ points to
// a folder the including folder may depend on. Lower never includes higher; the two backends never
// include each other (only the factory, backend/*.cpp, sees both; both use the communicators of
// backend/comm); cli and server never reach into a backend.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <string>
#include <vector>

#include "support/test_paths.h"

namespace dsv4 {
namespace {

namespace fs = std::filesystem;

// The folder a source path belongs to: "backend/cuda" for src/backend/cuda/x.cu, "backend" for
// src/backend/backend.h, "io" for src/io/config.h.
std::string unit_of(const std::string& rel) {
  const auto slash = rel.find('/');
  if (slash == std::string::npos) return "";
  const std::string top = rel.substr(0, slash);
  if (top != "backend") return top;
  const auto next = rel.find('/', slash + 1);
  return next == std::string::npos ? "backend" : rel.substr(0, next);
}

// What each folder may include besides itself.
const std::map<std::string, std::set<std::string>>& allowed() {
  static const std::map<std::string, std::set<std::string>> a = [] {
    std::map<std::string, std::set<std::string>> m;
    const std::set<std::string> backend_base = {"core", "io", "backend", "backend/comm"};
    m["core"] = {};
    m["io"] = {"core"};
    m["tokenizer"] = {"core"};
    m["grammar"] = {"core", "tokenizer"};
    m["chat"] = {"core", "io", "tokenizer"};
    m["backend"] = {"core", "io", "backend/cpu", "backend/cuda", "backend/comm"};  // the factory sees all
    m["backend/cpu"] = backend_base;
    m["backend/cuda"] = backend_base;
    m["backend/comm"] = {"core", "io", "backend"};
    m["model"] = {"core", "io", "backend"};
    // runtime sets up rank groups (their communicators), never a backend's internals.
    m["runtime"] = {"core", "io", "tokenizer", "grammar", "chat", "backend", "backend/comm", "model"};
    m["server"] = {"core", "io", "tokenizer", "grammar", "chat", "model", "runtime"};
    m["cli"] = {"core", "io", "tokenizer", "grammar", "chat", "model", "runtime", "server"};
    return m;
  }();
  return a;
}

TEST(Layering, IncludesPointDown) {
  const fs::path src = fs::path(test::source_dir()) / "src";
  ASSERT_TRUE(fs::is_directory(src)) << src;
  const std::regex inc(R"re(^\s*#\s*include\s+"([a-z_]+(?:/[a-z_]+)?)/[^"]+")re");
  std::vector<std::string> bad;
  size_t files = 0, includes = 0;
  for (const auto& e : fs::recursive_directory_iterator(src)) {
    if (!e.is_regular_file()) continue;
    const std::string ext = e.path().extension().string();
    if (ext != ".h" && ext != ".cpp" && ext != ".cu" && ext != ".cuh") continue;
    const std::string rel = fs::relative(e.path(), src).generic_string();
    const std::string from = unit_of(rel);
    const auto rule = allowed().find(from);
    if (rule == allowed().end()) {
      bad.push_back(rel + ": folder '" + from + "' has no rule in this test (add it to allowed())");
      continue;
    }
    ++files;
    std::ifstream in(e.path());
    std::string line;
    for (int n = 1; std::getline(in, line); ++n) {
      std::smatch m;
      if (!std::regex_search(line, m, inc)) continue;
      const std::string target = unit_of(m[1].str() + "/x");
      if (!allowed().count(target)) continue;  // not one of our folders (e.g. "generated/...")
      ++includes;
      if (target != from && !rule->second.count(target))
        bad.push_back(rel + ":" + std::to_string(n) + ": " + from + " includes " + target);
    }
  }
  EXPECT_GT(files, 100u);  // the walk found the tree
  EXPECT_GT(includes, 300u);
  for (const std::string& b : bad) ADD_FAILURE() << b;
}

TEST(Layering, UnitOfNamesBackendSubfolders) {
  EXPECT_EQ(unit_of("backend/cuda/sampling.cu"), "backend/cuda");
  EXPECT_EQ(unit_of("backend/backend.h"), "backend");
  EXPECT_EQ(unit_of("io/config.h"), "io");
  EXPECT_EQ(unit_of("main.cpp"), "");
}

}  // namespace
}  // namespace dsv4
