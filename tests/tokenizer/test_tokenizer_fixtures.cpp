// Every case of shared/fixtures/tokenizer/cases.json (produced with Hugging Face tokenizers): ids and
// decoded text must be equal both ways.
#include <gtest/gtest.h>

#include <fstream>

#include <nlohmann/json.hpp>

#include "support/test_paths.h"
#include "tokenizer/tokenizer.h"

namespace {

using dsv4::Tokenizer;

TEST(TokenizerFixtures, EveryCaseBothWays) {
  if (!dsv4::test::have_shared()) GTEST_SKIP() << "shared fixtures not present";
  Tokenizer tok = Tokenizer::load(dsv4::test::shared_dir() + "/models/tiny-shakespeare");
  std::ifstream f(dsv4::test::fixture_dir("tokenizer") + "/cases.json");
  ASSERT_TRUE(f) << "cannot open tokenizer/cases.json";
  const auto cases = nlohmann::json::parse(f);
  ASSERT_TRUE(cases.is_array());
  ASSERT_GE(cases.size(), 50u);
  size_t i = 0;
  for (const auto& c : cases) {
    const std::string text = c["text"].get<std::string>();
    const auto want = c["ids"].get<std::vector<int32_t>>();
    SCOPED_TRACE("case " + std::to_string(i++) + ": " + text.substr(0, 60));
    EXPECT_EQ(tok.encode(text), want);
    EXPECT_EQ(tok.decode(want), c["decoded"].get<std::string>());
  }
}

TEST(TokenizerFixtures, SpecialTokensResolvedByContent) {
  if (!dsv4::test::have_shared()) GTEST_SKIP() << "shared fixtures not present";
  Tokenizer tok = Tokenizer::load(dsv4::test::shared_dir() + "/models/tiny-shakespeare");
  // The tiny vocabulary puts the DeepSeek-V4 special tokens at other ids than the real one.
  EXPECT_EQ(tok.bos_id(), tok.token_id("<｜begin▁of▁sentence｜>"));
  EXPECT_EQ(tok.eos_id(), tok.token_id("<｜end▁of▁sentence｜>"));
  EXPECT_EQ(tok.pad_id(), tok.eos_id());
  ASSERT_TRUE(tok.token_id("<think>"));
  EXPECT_FALSE(tok.is_special(*tok.token_id("<think>")));
  EXPECT_TRUE(tok.is_special(*tok.token_id("<｜User｜>")));
  EXPECT_EQ(tok.vocab_size(), 1026);
}

}  // namespace
