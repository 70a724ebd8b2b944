// Reading the chat fixtures (shared/fixtures/chat) for the tests.
#pragma once
#include <fstream>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

#include "chat/parser.h"
#include "support/test_paths.h"

namespace dsv4::test {

inline std::string read_text(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::ostringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

inline nlohmann::ordered_json read_ordered_json(const std::string& path) {
  return nlohmann::ordered_json::parse(read_text(path));
}

inline std::string official(const std::string& file) { return fixture_dir("chat") + "/official/" + file; }

// Order-insensitive comparison form of a parsed message.
inline nlohmann::json unordered(const nlohmann::ordered_json& j) { return nlohmann::json::parse(j.dump()); }

}  // namespace dsv4::test
