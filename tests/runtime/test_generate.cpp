// The generation loop (runtime/generate.h; generate() over a Runner): stop strings cut exactly (also
// across token boundaries), and greedy decoding of the bundled model reproduces its golden
// continuation (reference numerics).
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <fstream>

#include "core/error.h"
#include "runtime/runner.h"
#include "support/test_paths.h"

namespace dsv4 {
namespace {

TEST(StopStringFilter, CutsExactlyAcrossPieces) {
  StopStringFilter f({"END", "xyz"});
  std::string out;
  for (std::string piece : {"hello E", "N", "D tail"}) out += f.push(piece);
  EXPECT_TRUE(f.stopped());
  EXPECT_EQ(out, "hello ");
  EXPECT_EQ(f.flush(), "");
}

TEST(StopStringFilter, HoldsBackOnlyPossiblePrefixes) {
  StopStringFilter f({"END"});
  EXPECT_EQ(f.push("abcE"), "abc");  // "E" may start END
  EXPECT_EQ(f.push("x"), "Ex");      // it did not
  EXPECT_EQ(f.push("EN"), "");
  EXPECT_FALSE(f.stopped());
  EXPECT_EQ(f.flush(), "EN");  // the stream ended: nothing was a stop
}

TEST(StopStringFilter, EarliestStopWins) {
  StopStringFilter f({"cd", "b"});
  EXPECT_EQ(f.push("abcd"), "a");
  EXPECT_TRUE(f.stopped());
}

class BundledModel : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = test::bundled_model_dir();
    std::ifstream in(dir_ + "/golden.json");
    golden_ = nlohmann::json::parse(in);
    model_ = Model::load(dir_, Numerics::Reference);
    tok_ = std::make_unique<Tokenizer>(Tokenizer::load(dir_));
  }
  std::string dir_;
  nlohmann::json golden_;
  std::unique_ptr<Model> model_;
  std::unique_ptr<Tokenizer> tok_;
};

TEST_F(BundledModel, GreedyReproducesGolden) {
  const auto& g = golden_["greedy"];
  const std::vector<int32_t> prompt = tok_->encode(g["prompt"].get<std::string>());
  EXPECT_EQ(prompt, g["prompt_ids"].get<std::vector<int32_t>>());
  SamplingParams p;
  p.temperature = 0;
  Sampler s(p);
  StopConditions stop;
  stop.max_tokens = g["new_tokens"].get<int>();
  std::string streamed;
  auto r = generate(*model_, *tok_, prompt, s, stop, -1, [&](const std::string& t) { streamed += t; });
  EXPECT_EQ(r.ids, g["ids"].get<std::vector<int32_t>>());
  EXPECT_EQ(r.text, g["text"].get<std::string>());
  EXPECT_EQ(streamed, r.text);
  EXPECT_EQ(r.finish, FinishReason::Length);
  EXPECT_EQ(r.stats.generated_tokens, 120);
}

TEST_F(BundledModel, StopStringAndEos) {
  const auto& g = golden_["greedy"];
  const std::string text = g["text"].get<std::string>();
  const std::string stop_at = "the field";  // occurs in the golden continuation
  ASSERT_NE(text.find(stop_at), std::string::npos);
  SamplingParams p;
  p.temperature = 0;
  Sampler s(p);
  StopConditions stop;
  stop.max_tokens = 120;
  stop.stop_strings = {stop_at};
  auto r = generate(*model_, *tok_, tok_->encode(g["prompt"].get<std::string>()), s, stop);
  EXPECT_EQ(r.text, text.substr(0, text.find(stop_at)));
  EXPECT_EQ(r.finish, FinishReason::Stop);
  // The 5th golden token as a stop id: generation ends after 4 tokens.
  StopConditions by_id;
  by_id.stop_ids = {g["ids"][4].get<int32_t>()};
  Sampler s2(p);
  auto r2 = generate(*model_, *tok_, tok_->encode(g["prompt"].get<std::string>()), s2, by_id);
  EXPECT_EQ(r2.ids.size(), 4u);
  EXPECT_EQ(r2.finish, FinishReason::Stop);
}

TEST_F(BundledModel, OverlongPromptIsAnError) {
  SamplingParams p;
  Sampler s(p);
  std::vector<int32_t> prompt(size_t(model_->config().max_position_embeddings), 5);
  try {
    generate(*model_, *tok_, prompt, s, {});
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("the model's context is 65536"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace dsv4
