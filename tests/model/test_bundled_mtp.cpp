// The bundled model's trained MTP block (mtp.0, tools/train-mtp) against the training script's own
// forward: tests/model/data/bundled_mtp_reference.safetensors holds 40 held-out tokens and the float32
// CPU logits of transformers' V4 modules (the main model over tokens 0..38; the MTP block fed the main
// streams at t and token t+1). Also: shipping the block left every main tensor byte-identical.
#include <gtest/gtest.h>

#include <cstring>

#include "golden.h"
#include "io/config.h"
#include "model/model.h"

namespace dsv4 {
namespace {

struct Reference {
  std::vector<int32_t> ids;
  Tensor main_logits, mtp_logits;  // [T-1, vocab] each
};

Reference load_reference() {
  auto f = SafetensorsFile::open(test::source_dir() + "/tests/model/data/bundled_mtp_reference.safetensors");
  Reference r;
  for (const auto& e : f->tensors()) {
    Tensor t = to_tensor(e.view);
    if (e.name == "input_ids") r.ids.assign(t.data.begin(), t.data.end());
    if (e.name == "main_logits") r.main_logits = std::move(t);
    if (e.name == "mtp_logits") r.mtp_logits = std::move(t);
  }
  return r;
}

// The main forward over ids[0..T-2] (its streams), then the MTP block over them with next ids
// ids[1..T-1]: first `prefill` positions in one call, the rest one position per call.
struct Outputs {
  Tensor main_logits, mtp_logits;
};
Outputs run(Model& m, const std::vector<int32_t>& ids, int64_t prefill) {
  const int64_t T = int64_t(ids.size()) - 1, V = m.config().vocab_size;
  const int64_t n = m.config().hc_mult, D = m.config().hidden_size;
  Sequence st(m);
  Tensor streams;
  Outputs r;
  r.main_logits = st.forward(std::vector<int32_t>(ids.begin(), ids.begin() + T), {.streams = &streams});
  r.mtp_logits = Tensor({T, V});
  for (int64_t done = 0; done < T;) {
    const int64_t c = done == 0 ? prefill : 1;
    Tensor x({c, n, D});
    std::memcpy(x.ptr(), streams.row(done * n), size_t(c * n * D) * sizeof(float));
    const Tensor l = st.forward_mtp(x, std::vector<int32_t>(ids.begin() + done + 1, ids.begin() + done + 1 + c));
    std::memcpy(r.mtp_logits.row(done), l.ptr(), size_t(c * V) * sizeof(float));
    done += c;
  }
  return r;
}

TEST(BundledMtp, ConfigAndCheckpointHaveOneSlidingBlock) {
  const ModelConfig c = load_config(test::bundled_model_dir());
  ASSERT_EQ(c.mtp_layers.size(), 1u);
  EXPECT_EQ(c.mtp_layers[0].attn, AttnKind::Sliding);
  EXPECT_EQ(c.mtp_layers[0].route, RouteKind::TopK);
  auto m = Model::load(test::bundled_model_dir(), Numerics::Reference);
  EXPECT_EQ(m->num_mtp(), 1);
}

// Reference numerics are float32 throughout, as is the script's forward: the two differ only in
// summation order. Measured 3.6e-7 (main) and 4.3e-7 (MTP) relative L2; the limit of 1e-5 is 20x
// that and far below what a wrong tensor, a swapped w1/w3 or an off-by-one pairing of streams and
// next ids gives (those change the logits at order 1).
TEST(BundledMtp, ReferenceNumericsMatchTheTrainingScript) {
  const Reference ref = load_reference();
  ASSERT_EQ(ref.ids.size(), 40u);
  auto m = Model::load(test::bundled_model_dir(), Numerics::Reference);
  const Outputs full = run(*m, ref.ids, int64_t(ref.ids.size()) - 1);
  test::expect_rel_l2(full.main_logits, ref.main_logits, 1e-5, "bundled main (reference)");
  test::expect_rel_l2(full.mtp_logits, ref.mtp_logits, 1e-5, "bundled mtp.0 (reference)");
  EXPECT_EQ(test::top1_agreement(full.mtp_logits, ref.mtp_logits), 1.0);
  // The block's own window ring: a prefill of 8, then one position per call past the 32-token window.
  const Outputs steps = run(*m, ref.ids, 8);
  test::expect_rel_l2(steps.mtp_logits, ref.mtp_logits, 1e-5, "bundled mtp.0 (reference, prefill 8 + steps)");
}

// Official numerics round activations to bf16 (the weights are bf16 already, nothing FP8 here): one
// block's worth of bf16 rounding against the float32 forward, measured 8.2e-3 relative L2 with all 39
// argmaxes equal; the limit is the one the fixture MTP tests use (fixtures/README.md: a few 1e-3 to 1e-2).
TEST(BundledMtp, OfficialNumericsStayCloseToTheTrainingScript) {
  const Reference ref = load_reference();
  auto m = Model::load(test::bundled_model_dir(), Numerics::Official);
  const Outputs r = run(*m, ref.ids, int64_t(ref.ids.size()) - 1);
  test::expect_rel_l2(r.mtp_logits, ref.mtp_logits, 0.03, "bundled mtp.0 (official vs float32)");
  EXPECT_GE(test::top1_agreement(r.mtp_logits, ref.mtp_logits), 0.95);
}

// Shipping the block only appended tensors: every tensor of the model as it was before (the copy in
// shared/models) has the same dtype, shape and bytes in the bundled checkpoint.
TEST(BundledMtp, MainTensorsAreByteIdentical) {
  const std::string before = test::shared_dir() + "/models/tiny-shakespeare/model.safetensors";
  if (!test::have_shared()) GTEST_SKIP() << "shared/ not found";
  auto a = SafetensorsFile::open(before);
  auto b = SafetensorsFile::open(test::bundled_model_dir() + "/model.safetensors");
  size_t mtp = 0;
  for (const auto& e : b->tensors()) mtp += e.name.rfind("mtp.0.", 0) == 0;
  EXPECT_EQ(mtp, 53u);  // 45 of a sliding, score-routed block + e_proj, h_proj, 3 norms, 3 hc_head
  EXPECT_EQ(b->tensors().size(), a->tensors().size() + mtp);
  for (const auto& e : a->tensors()) {
    const auto it = std::find_if(b->tensors().begin(), b->tensors().end(),
                                 [&](const TensorEntry& x) { return x.name == e.name; });
    ASSERT_NE(it, b->tensors().end()) << e.name;
    EXPECT_EQ(it->view.dtype, e.view.dtype) << e.name;
    EXPECT_EQ(it->view.shape, e.view.shape) << e.name;
    ASSERT_EQ(it->view.nbytes, e.view.nbytes) << e.name;
    EXPECT_EQ(std::memcmp(it->view.data, e.view.data, e.view.nbytes), 0) << e.name;
  }
}

}  // namespace
}  // namespace dsv4
