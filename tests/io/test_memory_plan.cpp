// The memory plan (src/io/memory_plan.h): weight bytes against the published checkpoints' totals and a
// measured GPU upload, KV bytes hand-computed from AttentionLayerState, the expert split across GPUs,
// and the one-line error when a model does not fit.
#include <gtest/gtest.h>

#include "core/error.h"
#include "io/config.h"
#include "io/memory_plan.h"
#include "io/presets.h"
#include "io/safetensors.h"
#include "io/weights.h"
#include "support/test_paths.h"

namespace dsv4 {
namespace {

constexpr uint64_t kGiB = uint64_t(1) << 30;

TEST(MemoryPlan, PublishedFlashAndProStoredBytesMatchTheOfficialIndex) {
  // FORMATS.md §3.5: the official model.safetensors.index.json total_size, byte for byte.
  EXPECT_EQ(published_weight_inventory(preset_config("flash")).stored, 159609485896u);  // with mtp.0
  EXPECT_EQ(published_weight_inventory(preset_config("pro")).stored, 864704792696u);
  ModelConfig main = preset_config("flash");
  truncate_layers(main, 43);  // drops the MTP block
  EXPECT_EQ(published_weight_inventory(main).stored, 156015698140u);
}

TEST(MemoryPlan, FlashDeviceBytesMatchTheMeasuredUpload) {
  // docs/bench/2026-12-01-flash20-*.json: `dsv4 bench --preset flash --dummy-weights --layers 20` on an
  // H200 reported weights_device_bytes 74345458912; that binary's count left out the head's hc_base [4]
  // and hc_scale [1] fp32 (20 bytes), which the GPU holds too (upload_weights counts them since 2026-12-02).
  ModelConfig c = preset_config("flash");
  truncate_layers(c, 20);
  EXPECT_EQ(published_weight_inventory(c).total(), 74345458912u + 20u);
  // The CUDA fast tier holds wo_a as its FP8 codes [8192, 4096] and fp32 scales [64, 32] instead of the
  // bf16 matrix, per layer.
  const WeightInventory fast = published_weight_inventory(c, true);
  EXPECT_EQ(fast.total(), 74345458912u + 20u - 20u * (8192u * 4096u * 2u) + 20u * (8192u * 4096u + 64u * 32u * 4u));
  EXPECT_EQ(fast.stored, published_weight_inventory(c).stored);  // the same checkpoint
  EXPECT_TRUE(fast.wo_a_codes);
  EXPECT_FALSE(published_weight_inventory(c).wo_a_codes);
}

TEST(MemoryPlan, FastTierWorkspaceHoldsBf16RowsOfWoA) {
  // The codes are widened 4 groups at a time (32 MiB of bf16 rows [4 x 1024, 4096]) for calls above
  // fast_gemv's tokens; Pro's 16 groups of 1024 x 4096 the same way; a group above 32 MiB goes alone.
  const ModelConfig c = preset_config("flash");
  EXPECT_EQ(wo_a_scratch_groups(c), 4);
  EXPECT_EQ(wo_a_scratch_bytes(c), 4u * 1024u * 4096u * 2u);
  EXPECT_EQ(wo_a_scratch_groups(preset_config("pro")), 4);
  ModelConfig big = c;
  big.o_lora_rank = 8192;  // 64 MiB per group
  EXPECT_EQ(wo_a_scratch_groups(big), 1);
  ModelConfig odd = c;
  odd.o_groups = 6, odd.num_heads = 48;  // 8 MiB per group: 3 (24 MiB) divides 6, 4 does not
  EXPECT_EQ(wo_a_scratch_groups(odd), 3);
  const MemoryPlanOptions o{.gpus = 1, .context = 4096, .sequences = 1, .max_tokens = 256};
  const GpuPlan exact = plan_memory(c, published_weight_inventory(c), o).largest();
  const GpuPlan fast = plan_memory(c, published_weight_inventory(c, true), o).largest();
  EXPECT_EQ(fast.workspace, exact.workspace + wo_a_scratch_bytes(c));
  EXPECT_EQ(exact.weights - fast.weights, 44u * (8192u * 4096u - 64u * 32u * 4u));  // 43 layers + mtp.0
}

TEST(MemoryPlan, FlashRoutedExperts) {
  const WeightInventory w = published_weight_inventory(preset_config("flash"));
  ASSERT_EQ(w.experts.size(), 44u);  // 43 layers + mtp.0
  for (const auto& block : w.experts) {
    ASSERT_EQ(block.size(), 256u);
    // w1, w3 [2048, 4096] and w2 [4096, 2048] packed FP4 (0.5 B) + E8M0 per 32: 3 x (4 Mi + 256 Ki).
    for (uint64_t e : block) ASSERT_EQ(e, 3u * (4194304u + 262144u));
  }
  EXPECT_EQ(w.routed(), uint64_t(44) * 256 * 13369344);
}

std::string tiny_q_dir() { return test::fixture_dir("tiny-q") + "/model"; }

TEST(MemoryPlan, ACheckpointInThePublishedFormatsCountsAsItsConfigSays) {
  if (!test::have_shared()) GTEST_SKIP() << "no shared fixtures";
  const ModelConfig cfg = load_config(tiny_q_dir());
  const auto ckpt = Checkpoint::open(tiny_q_dir());
  const Weights w = bind_weights(cfg, *ckpt);
  ASSERT_TRUE(w.unused.empty());
  const WeightInventory got = weight_inventory(cfg, w), want = published_weight_inventory(cfg);
  EXPECT_EQ(got.stored, ckpt->total_bytes());  // every tensor counted once
  EXPECT_EQ(got.stored, want.stored);
  EXPECT_EQ(got.replicated, want.replicated);
  EXPECT_EQ(got.experts, want.experts);
  // One routed expert of tiny-q (I = D = 256): 3 x (256 x 256 / 2 FP4 + 256 x 8 E8M0) = 104448 bytes;
  // 4 layers + mtp.0, 8 experts each.
  ASSERT_EQ(got.experts.size(), 5u);
  EXPECT_EQ(got.experts[0], std::vector<uint64_t>(8, 104448u));
  EXPECT_EQ(got.routed(), 5u * 8u * 104448u);
}

TEST(MemoryPlan, KvBytesFollowTheAttentionLayerStates) {
  if (!test::have_shared()) GTEST_SKIP() << "no shared fixtures";
  const ModelConfig cfg = load_config(tiny_q_dir());  // W 16, d 128, dI 128, ratios 0, 4, 16, 4
  // 2 slots of 64 positions, calls of 8 tokens (chunk rows padded to 16), bytes by hand; ring and chunk
  // rows bf16, the pool's entries as records of 64 FP8 codes + 64 bf16 rope dims + 1 scale = 193 -> 200
  // bytes, indexer keys 64 + 4 = 68 bytes (docs/kv-records.md):
  //   sliding: (2 x 16 ring + 16 chunk) x 128 x 2                                  = 12288
  //   CSA (4): (32 + 16) x 256 + 2 x 16 entries x 200 = 18688; cur_a/g 2x2x4x2x128x4 = 16384; prev 8192;
  //            indexer cur 16384, prev 8192, keys 2 x 16 x 68 = 2176              = 70016
  //   HCA (16): (32 + 16) x 256 + 2 x 4 x 200 = 13888; cur_a/g 2 x 2 x 16 x 128 x 4 = 32768 = 46656
  EXPECT_EQ(kv_bytes(cfg, 2, 64, 8), 12288u + 70016u + 46656u + 70016u);
  EXPECT_EQ(kv_bytes(cfg, 1, 64, 8) * 2 - kv_bytes(cfg, 2, 64, 8), 4u * 16u * 128u * 2u);  // chunk rows once per layer
  // mtp.0 (compress ratio 0: a sliding block) has its own ring and chunk rows: (2 x 16 + 16) x 128 x 2.
  EXPECT_EQ(kv_bytes(cfg, 2, 64, 8, 1) - kv_bytes(cfg, 2, 64, 8), 12288u);
  const auto ckpt = Checkpoint::open(tiny_q_dir());
  const WeightInventory w = weight_inventory(cfg, bind_weights(cfg, *ckpt));
  EXPECT_EQ(w.mtp_blocks, 1);
  EXPECT_EQ(plan_memory(cfg, w, {.context = 64, .sequences = 2, .max_tokens = 8}).gpus[0].kv,
            kv_bytes(cfg, 2, 64, 8, 1));
}

TEST(MemoryPlan, FlashKvPerSequence) {
  // 43 layers: ring 128 rows each; 21 CSA layers 1024 entries at 4096 positions, 20 HCA layers 32; ring
  // and chunk rows bf16, entries 584-byte records, indexer keys 68-byte records.
  const ModelConfig c = preset_config("flash");
  const uint64_t d = 512 * 2;
  uint64_t want = 43 * (128 + 256) * d;                                           // rings + chunk rows
  want += 21 * (1024 * 584 + 2 * 4 * 2 * 512 * 4 + 2 * 4 * 512 * 4 + 2 * 4 * 2 * 128 * 4 + 2 * 4 * 128 * 4 + 1024 * 68);
  want += 20 * (32 * 584 + 2 * 128 * 512 * 4);
  EXPECT_EQ(kv_bytes(c, 1, 4096, 256), want);
}

TEST(MemoryPlan, ExpertsSplitEvenlyEverythingElseReplicated) {
  const ModelConfig c = preset_config("flash");
  const WeightInventory w = published_weight_inventory(c);
  const MemoryPlan one = plan_memory(c, w, {.gpus = 1});
  const MemoryPlan two = plan_memory(c, w, {.gpus = 2, .sequences = 2});
  ASSERT_EQ(one.gpus.size(), 1u);
  ASSERT_EQ(two.gpus.size(), 2u);
  EXPECT_EQ(one.gpus[0].weights, w.total());
  EXPECT_EQ(one.gpus[0].experts, 256);
  for (const GpuPlan& g : two.gpus) {
    EXPECT_EQ(g.experts, 128);
    EXPECT_EQ(g.weights, w.replicated + w.routed() / 2);
    EXPECT_EQ(g.sequences, 1);  // data-parallel attention: each GPU its own sequence
    EXPECT_EQ(g.kv, one.gpus[0].kv);
  }
  EXPECT_EQ(two.gpus[1].first_expert, 128);
  // 3 GPUs of tiny-q's 8 experts: 2, 3, 3 (GPU g holds [g E / N, (g + 1) E / N)).
  ModelConfig small = c;
  small.n_routed_experts = 8;
  WeightInventory ws;
  ws.experts = {{1, 2, 3, 4, 5, 6, 7, 8}};
  const MemoryPlan three = plan_memory(small, ws, {.gpus = 3});
  EXPECT_EQ(three.gpus[0].experts, 2);
  EXPECT_EQ(three.gpus[1].experts, 3);
  EXPECT_EQ(three.gpus[2].first_expert, 5);
  EXPECT_EQ(three.gpus[0].weights, 1u + 2u);
  EXPECT_EQ(three.gpus[1].weights, 3u + 4u + 5u);
  EXPECT_EQ(three.gpus[2].weights, 6u + 7u + 8u);
  EXPECT_EQ(three.largest().gpu, 2);
}

TEST(MemoryPlan, FlashNeedsTwoH200s) {
  const ModelConfig c = preset_config("flash");
  const WeightInventory w = published_weight_inventory(c);
  const uint64_t h200 = uint64_t(139.7 * double(kGiB));  // what one H200 has free after its CUDA context
  std::string msg;
  try {
    check_memory(c, w, {.gpus = 1}, h200);
  } catch (const Error& e) {
    msg = e.what();
  }
  EXPECT_EQ(msg.find("needs "), 0u) << msg;
  EXPECT_NE(msg.find(" per GPU on 1 GPU(s) (weights "), std::string::npos) << msg;
  EXPECT_NE(msg.find("the GPU has 139.70 GiB; use --gpus 2"), std::string::npos) << msg;
  EXPECT_EQ(msg.find('\n'), std::string::npos);
  const MemoryPlan p = check_memory(c, w, {.gpus = 2}, h200);
  EXPECT_LT(p.largest().total(), h200);
  // No number of GPUs holds a context whose KV alone is larger than the GPU (1M positions x 64 sequences).
  try {
    check_memory(c, w, {.gpus = 1, .context = 1 << 20, .sequences = 64 * 256}, h200);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("no number of GPUs up to 256 fits"), std::string::npos) << e.what();
  }
}

TEST(MemoryPlan, BadOptions) {
  const ModelConfig c = preset_config("flash");
  const WeightInventory w = published_weight_inventory(c);
  auto error = [&](const MemoryPlanOptions& o) -> std::string {
    try {
      plan_memory(c, w, o);
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  };
  EXPECT_EQ(error({.gpus = 0}), "--gpus: expected at least 1, got 0");
  EXPECT_EQ(error({.gpus = 257}),
            "--gpus 257: the model has 256 routed experts per layer; expert parallelism needs at most one GPU per expert");
  EXPECT_EQ(error({.context = 0}), "memory plan: the context must be at least 1 position, got 0");
  EXPECT_EQ(error({.sequences = 0}), "memory plan: the number of sequences must be at least 1, got 0");
}

}  // namespace
}  // namespace dsv4
