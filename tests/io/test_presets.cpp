// --preset flash|pro against the published numbers (shared/docs/FORMATS.md §2.1-2.2, §3.3; MODEL.md §1),
// and --layers truncation. CPU only.
#include <gtest/gtest.h>

#include "core/error.h"
#include "io/presets.h"

namespace dsv4 {
namespace {

TEST(Presets, FlashMatchesThePublishedConfig) {
  const ModelConfig c = preset_config("flash");
  EXPECT_EQ(c.vocab_size, 129280);
  EXPECT_EQ(c.hidden_size, 4096);
  EXPECT_EQ(c.num_layers, 43);
  EXPECT_EQ(c.num_heads, 64);
  EXPECT_EQ(c.head_dim, 512);
  EXPECT_EQ(c.rope_dim, 64);
  EXPECT_EQ(c.q_lora_rank, 1024);
  EXPECT_EQ(c.o_groups, 8);
  EXPECT_EQ(c.o_lora_rank, 1024);
  EXPECT_EQ(c.sliding_window, 128);
  EXPECT_EQ(c.n_routed_experts, 256);
  EXPECT_EQ(c.n_shared_experts, 1);
  EXPECT_EQ(c.experts_per_tok, 6);
  EXPECT_EQ(c.moe_inter_dim, 2048);
  EXPECT_DOUBLE_EQ(c.routed_scaling_factor, 1.5);
  EXPECT_DOUBLE_EQ(c.swiglu_limit, 10.0);
  EXPECT_EQ(c.index_n_heads, 64);
  EXPECT_EQ(c.index_head_dim, 128);
  EXPECT_EQ(c.index_topk, 512);
  EXPECT_EQ(c.hc_mult, 4);
  EXPECT_EQ(c.hc_sinkhorn_iters, 20);
  EXPECT_EQ(c.max_position_embeddings, 1048576);
  EXPECT_DOUBLE_EQ(c.rope_main.theta, 10000.0);
  EXPECT_FALSE(c.rope_main.yarn);
  EXPECT_DOUBLE_EQ(c.rope_compress.theta, 160000.0);
  EXPECT_TRUE(c.rope_compress.yarn);
  EXPECT_DOUBLE_EQ(c.rope_compress.factor, 16.0);
  EXPECT_EQ(c.rope_compress.original_max_position, 65536);
  ASSERT_EQ(c.layers.size(), 43u);
  // MODEL.md §1: 0, 1 sliding; 2, 4, ..., 42 CSA (ratio 4); 3, 5, ..., 41 HCA (ratio 128); hash 0..2.
  for (size_t i = 0; i < 43; ++i) {
    const LayerSpec& l = c.layers[i];
    if (i < 2) {
      EXPECT_EQ(l.attn, AttnKind::Sliding) << i;
    } else if (i % 2 == 0) {
      EXPECT_EQ(l.attn, AttnKind::CSA) << i;
      EXPECT_EQ(l.ratio, 4) << i;
    } else {
      EXPECT_EQ(l.attn, AttnKind::HCA) << i;
      EXPECT_EQ(l.ratio, 128) << i;
    }
    EXPECT_EQ(l.route, i < 3 ? RouteKind::Hash : RouteKind::TopK) << i;
  }
  ASSERT_EQ(c.mtp_layers.size(), 1u);
  EXPECT_EQ(c.mtp_layers[0].attn, AttnKind::Sliding);
  // FORMATS.md §3.3 shapes that follow: wq_b [32768, 1024], wo_a [8192, 4096], wo_b [4096, 8192].
  EXPECT_EQ(c.num_heads * c.head_dim, 32768);
  EXPECT_EQ(c.o_groups * c.o_lora_rank, 8192);
  EXPECT_EQ(c.num_heads * c.head_dim / c.o_groups, 4096);
}

TEST(Presets, ProDiffersFromFlashOnlyWhereTheDocsSay) {
  const ModelConfig c = preset_config("pro");
  EXPECT_EQ(c.hidden_size, 7168);
  EXPECT_EQ(c.num_layers, 61);
  EXPECT_EQ(c.num_heads, 128);
  EXPECT_EQ(c.q_lora_rank, 1536);
  EXPECT_EQ(c.o_groups, 16);
  EXPECT_EQ(c.index_topk, 1024);
  EXPECT_EQ(c.n_routed_experts, 384);
  EXPECT_EQ(c.moe_inter_dim, 3072);
  EXPECT_DOUBLE_EQ(c.routed_scaling_factor, 2.5);
  // Unchanged from Flash.
  EXPECT_EQ(c.head_dim, 512);
  EXPECT_EQ(c.rope_dim, 64);
  EXPECT_EQ(c.o_lora_rank, 1024);
  EXPECT_EQ(c.sliding_window, 128);
  EXPECT_EQ(c.index_n_heads, 64);
  EXPECT_EQ(c.index_head_dim, 128);
  EXPECT_EQ(c.experts_per_tok, 6);
  EXPECT_EQ(c.vocab_size, 129280);
  // FORMATS.md §3.3: ratio 128 = 0, 1, 3, 5, ..., 59; ratio 4 = 2, 4, ..., 60; no sliding layer.
  ASSERT_EQ(c.layers.size(), 61u);
  for (size_t i = 0; i < 61; ++i) {
    const bool csa = i >= 2 && i % 2 == 0;
    EXPECT_EQ(c.layers[i].attn, csa ? AttnKind::CSA : AttnKind::HCA) << i;
    EXPECT_EQ(c.layers[i].ratio, csa ? 4 : 128) << i;
  }
  // FORMATS.md §3.3: wq_b [65536, 1536], wo_a [16384, 4096], wo_b [7168, 16384].
  EXPECT_EQ(c.num_heads * c.head_dim, 65536);
  EXPECT_EQ(c.o_groups * c.o_lora_rank, 16384);
  EXPECT_EQ(c.num_heads * c.head_dim / c.o_groups, 4096);
}

TEST(Presets, TruncateKeepsTheFirstLayers) {
  ModelConfig c = preset_config("flash");
  truncate_layers(c, 4);
  EXPECT_EQ(c.num_layers, 4);
  ASSERT_EQ(c.layers.size(), 4u);
  EXPECT_EQ(c.layers[2].attn, AttnKind::CSA);
  EXPECT_EQ(c.layers[3].attn, AttnKind::HCA);
  EXPECT_TRUE(c.mtp_layers.empty());
  EXPECT_THROW(truncate_layers(c, 0), Error);
  EXPECT_THROW(truncate_layers(c, 5), Error);
}

TEST(Presets, UnknownNameIsAnError) { EXPECT_THROW(preset_config("v4.1"), Error); }

}  // namespace
}  // namespace dsv4
