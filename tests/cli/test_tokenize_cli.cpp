// The `dsv4 tokenize` and `dsv4 template` commands, run as a user would (the built binary via popen).
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "support/test_paths.h"

namespace {

namespace fs = std::filesystem;

struct CmdResult {
  int rc;
  std::string out;
};

std::string quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

CmdResult run(const std::string& args) {
  std::string cmd = quote(dsv4::test::dsv4_binary()) + " " + args;
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return {-1, ""};
  std::string out;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  int st = pclose(p);
  return {WIFEXITED(st) ? WEXITSTATUS(st) : -1, out};
}

std::string read_text(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::ostringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

class TokenizeCli : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!fs::exists(dsv4::test::dsv4_binary())) GTEST_SKIP() << "dsv4 binary not built";
    if (!dsv4::test::have_shared()) GTEST_SKIP() << "shared fixtures not present";
    tmp_ = fs::temp_directory_path() / ("dsv4_cli_tok_" + std::to_string(::getpid()));
    fs::create_directories(tmp_);
  }
  void TearDown() override {
    if (!tmp_.empty()) fs::remove_all(tmp_);
  }
  std::string model() const { return quote(dsv4::test::bundled_model_dir()); }
  fs::path tmp_;
};

TEST_F(TokenizeCli, TextToJsonIdsAndBack) {
  const auto cases = nlohmann::json::parse(read_text(dsv4::test::fixture_dir("tokenizer") + "/cases.json"));
  for (size_t i : {0, 1, 7, 21}) {
    const std::string text = cases[i]["text"];
    const auto want = cases[i]["ids"].get<std::vector<int>>();
    SCOPED_TRACE(text);
    CmdResult r = run("tokenize -m " + model() + " --text " + quote(text) + " --json");
    ASSERT_EQ(r.rc, 0) << r.out;
    EXPECT_EQ(nlohmann::json::parse(r.out).get<std::vector<int>>(), want);

    std::string list;
    for (int id : want) {
      if (!list.empty()) list += ',';
      list += std::to_string(id);
    }
    CmdResult d = run("tokenize -m " + model() + " --decode " + list);
    ASSERT_EQ(d.rc, 0) << d.out;
    EXPECT_EQ(d.out, text);  // exactly the text, nothing added
  }
  // Without --json: ids separated by spaces; -m defaults to the bundled model.
  CmdResult r = run("tokenize --text " + quote(cases[0]["text"].get<std::string>()));
  ASSERT_EQ(r.rc, 0);
  EXPECT_EQ(r.out, "52 434 91 24 909 13\n");
}

TEST_F(TokenizeCli, TemplateRendersTheOfficialPromptsExactly) {
  const std::string off = dsv4::test::fixture_dir("chat") + "/official/";
  CmdResult r = run("template --messages " + quote(off + "test_input_2.json") + " --thinking");
  ASSERT_EQ(r.rc, 0) << r.out;
  EXPECT_EQ(r.out, read_text(off + "test_output_2.txt"));
  // {"tools", "messages"}: the tools go on the leading system message, as DeepSeek's test does.
  r = run("template --messages " + quote(off + "test_input_1.json") + " --thinking");
  ASSERT_EQ(r.rc, 0) << r.out;
  EXPECT_EQ(r.out, read_text(off + "test_output_1.txt"));
  r = run("template -m " + model() + " --messages " + quote(off + "test_input_4.json") + " --chat");
  ASSERT_EQ(r.rc, 0) << r.out;
  EXPECT_EQ(r.out, read_text(off + "test_output_4.txt"));
}

TEST_F(TokenizeCli, TemplateIdsEqualTokenizingThePrompt) {
  const fs::path msgs = tmp_ / "m.json";
  std::ofstream(msgs) << R"([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Who is ROMEO?"}])";
  CmdResult text = run("template --messages " + quote(msgs.string()) + " --thinking --effort max");
  ASSERT_EQ(text.rc, 0) << text.out;
  EXPECT_TRUE(text.out.starts_with("<｜begin▁of▁sentence｜>Reasoning Effort: Absolute maximum"));
  EXPECT_TRUE(text.out.ends_with("<｜Assistant｜><think>"));
  const fs::path prompt = tmp_ / "prompt.txt";
  std::ofstream(prompt, std::ios::binary) << text.out;
  CmdResult ids = run("template -m " + model() + " --messages " + quote(msgs.string()) + " --thinking --effort max --ids --json");
  CmdResult direct = run("tokenize -m " + model() + " --file " + quote(prompt.string()) + " --json");
  ASSERT_EQ(ids.rc, 0) << ids.out;
  ASSERT_EQ(direct.rc, 0) << direct.out;
  EXPECT_EQ(ids.out, direct.out);
  auto parsed = nlohmann::json::parse(ids.out);
  ASSERT_FALSE(parsed.empty());
  CmdResult bos = run("tokenize -m " + model() + " --text " + quote("<｜begin▁of▁sentence｜>") + " --json");
  EXPECT_EQ(parsed[0], nlohmann::json::parse(bos.out)[0]);  // BOS comes from the prompt text
}

TEST_F(TokenizeCli, BadInputIsAOneLineError) {
  const fs::path bad = tmp_ / "bad.json";
  std::ofstream(bad) << "[{\"role\": \"user\",";
  CmdResult r = run("template --messages " + quote(bad.string()) + " 2>&1");
  EXPECT_EQ(r.rc, 1);
  EXPECT_NE(r.out.find("dsv4: error: " + bad.string() + ": malformed JSON"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find('\n'), r.out.size() - 1) << r.out;

  std::ofstream(bad) << R"([{"role": "wizard", "content": "x"}])";
  r = run("template --messages " + quote(bad.string()) + " 2>&1");
  EXPECT_EQ(r.rc, 1);
  EXPECT_NE(r.out.find("unknown role \"wizard\""), std::string::npos) << r.out;

  r = run("tokenize --decode 1,two 2>&1");
  EXPECT_EQ(r.rc, 1);
  EXPECT_NE(r.out.find("\"two\" is not a token id"), std::string::npos) << r.out;
  r = run("tokenize -m " + quote(tmp_.string()) + " --text hi 2>&1");
  EXPECT_EQ(r.rc, 1);
  EXPECT_NE(r.out.find("tokenizer.json: not found"), std::string::npos) << r.out;
}

}  // namespace
