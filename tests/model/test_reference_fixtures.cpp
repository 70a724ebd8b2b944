// Reference numerics (float32) against transformers' outputs: tiny-a / tiny-b (logits for three feeding
// schedules, every hidden state, greedy tokens) and the published-format models' logits_steps_hf_fp32.
#include <gtest/gtest.h>

#include "model/golden.h"
#include "model/model.h"
#include "model/schedule.h"

namespace dsv4 {
namespace {

using test::Golden;

constexpr double kTol = 1e-4;  // fixtures/README.md: reference numerics within relative L2 1e-4

// Runs `ids` with the given chunk sizes and returns the logits of every position.
Tensor run(Model& m, const std::vector<int32_t>& ids, const std::vector<int64_t>& chunks) {
  Sequence st(m);
  Tensor out({int64_t(ids.size()), m.config().vocab_size});
  int64_t done = 0;
  for (int64_t c : chunks) {
    Tensor l = st.forward(std::vector<int32_t>(ids.begin() + done, ids.begin() + done + c));
    std::copy(l.data.begin(), l.data.end(), out.row(done));
    done += c;
  }
  return out;
}

class ReferenceFixture : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    if (!test::have_shared()) GTEST_SKIP() << "shared/fixtures not found";
  }
};

TEST_P(ReferenceFixture, LogitsFullDecodeChunks) {
  Golden g(GetParam());
  auto m = Model::load(test::fixture_dir(GetParam()) + "/model", Numerics::Reference);
  const auto ids = g.ids("input_ids");
  const int64_t n = int64_t(ids.size());
  test::expect_rel_l2(run(*m, ids, {n}), g["logits_full"], kTol, GetParam() + " logits_full");
  const int64_t P = g.manifest["prefill_then_decode"]["prefill"].get<int64_t>();
  test::expect_rel_l2(run(*m, ids, parse_schedule("decode:" + std::to_string(P), n)), g["logits_decode"], kTol,
                      GetParam() + " logits_decode");
  std::string chunks = "chunks:";
  for (auto& c : g.manifest["chunks"]) chunks += std::to_string(c.get<int64_t>()) + ",";
  chunks.pop_back();
  test::expect_rel_l2(run(*m, ids, parse_schedule(chunks, n)), g["logits_chunks"], kTol,
                      GetParam() + " logits_chunks " + chunks);
}

TEST_P(ReferenceFixture, HiddenStates) {
  Golden g(GetParam());
  auto m = Model::load(test::fixture_dir(GetParam()) + "/model", Numerics::Reference);
  const auto ids = g.ids("input_ids");
  std::vector<Tensor> hidden;
  Sequence st(*m);
  ForwardOptions opt;
  opt.hidden = &hidden;
  st.forward(ids, opt);
  ASSERT_EQ(hidden.size(), size_t(m->config().num_layers + 1));
  for (size_t i = 0; i < hidden.size(); ++i)
    test::expect_rel_l2(hidden[i], g["hidden_" + std::to_string(i)], kTol, GetParam() + " hidden_" + std::to_string(i));
}

TEST_P(ReferenceFixture, GreedyTokens) {
  Golden g(GetParam());
  auto m = Model::load(test::fixture_dir(GetParam()) + "/model", Numerics::Reference);
  const auto prompt = g.ids("greedy_prompt"), want = g.ids("greedy_tokens");
  Sequence st(*m);
  ForwardOptions last;
  last.all_logits = false;
  Tensor l = st.forward(prompt, last);
  std::vector<int32_t> got;
  while (got.size() < want.size()) {
    const float* r = l.row(0);
    int32_t next = int32_t(std::max_element(r, r + m->config().vocab_size) - r);
    got.push_back(next);
    l = st.forward({next}, last);
  }
  EXPECT_EQ(got, want);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, ReferenceFixture, ::testing::Values("tiny-a", "tiny-b"),
                         [](const auto& info) { return test::test_name(info.param); });

// Published on-disk format (FP8 / FP4 + e8m0, legacy config) in reference numerics vs transformers fp32
// on the dequantized weights, with the prefill-then-decode schedule of logits_steps.
class PublishedFormat : public ReferenceFixture {};

TEST_P(PublishedFormat, StepsMatchTransformersFp32) {
  Golden g(GetParam());
  auto m = Model::load(test::fixture_dir(GetParam()) + "/model", Numerics::Reference);
  const auto ids = g.ids("input_ids");
  const int64_t P = g.manifest["prefill"].get<int64_t>(), n = int64_t(ids.size());
  Tensor all = run(*m, ids, parse_schedule("decode:" + std::to_string(P), n));
  const Tensor& want = g["logits_steps_hf_fp32"];
  ASSERT_EQ(want.dim(0), n - P + 1);
  Tensor got({want.dim(0), want.dim(1)});
  std::copy(all.row(P - 1), all.row(P - 1) + got.numel(), got.ptr());
  test::expect_rel_l2(got, want, kTol, GetParam() + " logits_steps_hf_fp32");
}

INSTANTIATE_TEST_SUITE_P(Fixtures, PublishedFormat,
                         ::testing::Values("tiny-q", "tiny-q-wide", "tiny-shakespeare-fp8"),
                         [](const auto& info) { return test::test_name(info.param); });

}  // namespace
}  // namespace dsv4
