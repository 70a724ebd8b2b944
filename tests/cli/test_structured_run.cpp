// dsv4 run --json-schema: the printed output parses and validates when generation ended on EOS
// (--json-object is covered by the grammar and server tests: the bundled model's free-text keys
// rarely end within a CLI test's token budget); a bad or unsupported schema is a one-line error naming the flag.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>

#include "grammar/schema_validator.h"
#include "support/run_command.h"
#include "support/test_paths.h"

namespace dsv4 {
namespace {

using json = nlohmann::ordered_json;

TEST(RunStructured, JsonSchemaOutputValidates) {
  const json schema = json::parse(R"({"type":"object","properties":{"name":{"type":"string","maxLength":8},
    "n":{"type":"integer"},"ok":{"type":"boolean"}},"required":["name","n"]})");
  int parsed = 0;
  for (int seed = 1; seed <= 3; ++seed) {
    auto r = test::run_command(test::dsv4_binary() + " run -n 300 --seed " + std::to_string(seed) +
                               " --json-schema '" + schema.dump() + "' 'ROMEO:'");
    ASSERT_EQ(r.exit_code, 0) << r.output;
    json v = json::parse(r.output, nullptr, false);
    if (v.is_discarded()) continue;  // stopped at -n before the grammar ended
    ++parsed;
    EXPECT_EQ(test::validate(v, schema, schema), "") << r.output;
  }
  EXPECT_GE(parsed, 2);
}

TEST(RunStructured, SchemaFromAFile) {
  const std::string file = (std::filesystem::temp_directory_path() / "dsv4-structured-run.json").string();
  std::ofstream(file) << R"({"type":"array","items":{"type":"integer"},"maxItems":3})";
  auto r = test::run_command(test::dsv4_binary() + " run -n 100 --seed 5 --json-schema " + file + " 'x'");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const json v = json::parse(r.output, nullptr, false);
  ASSERT_TRUE(v.is_array()) << r.output;
  EXPECT_LE(v.size(), 3u);
  std::filesystem::remove(file);
}

TEST(RunStructured, GrammarFile) {
  const std::string file = (std::filesystem::temp_directory_path() / "dsv4-structured-run.gbnf").string();
  std::ofstream(file) << "root ::= (\"yes\" | \"no\") (\", \" root)?\n";
  auto r = test::run_command(test::dsv4_binary() + " run -n 50 --seed 6 --grammar " + file + " 'x'");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  std::string out = r.output;
  while (!out.empty() && out.back() == '\n') out.pop_back();
  ASSERT_FALSE(out.empty());
  // yes/no words joined by ", " (possibly cut at -n)
  for (size_t i = 0; i < out.size();) {
    const std::string rest = out.substr(i);
    if (rest.rfind("yes", 0) == 0) i += 3;
    else if (rest.rfind("no", 0) == 0) i += 2;
    else if (rest.rfind(", ", 0) == 0) i += 2;
    else if (std::string("yes").rfind(rest, 0) == 0 || std::string("no").rfind(rest, 0) == 0 ||
             std::string(", ").rfind(rest, 0) == 0)
      break;  // cut by -n
    else FAIL() << "not of the grammar: " << out;
  }
  std::ofstream(file) << "root ::= \"a\" missing\n";
  r = test::run_command(test::dsv4_binary() + " run --grammar " + file + " 'x'");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("'missing'"), std::string::npos) << r.output;
  std::filesystem::remove(file);
}

TEST(RunStructured, UnsupportedSchemaIsAnErrorNamingTheFlag) {
  auto r = test::run_command(test::dsv4_binary() + " run --json-schema '{\"type\":\"integer\",\"minimum\":1}' x");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("--json-schema"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("'minimum'"), std::string::npos) << r.output;
  r = test::run_command(test::dsv4_binary() + " run --json-schema '{nope' x");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("--json-schema"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace dsv4
