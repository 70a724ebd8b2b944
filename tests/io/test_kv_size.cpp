// KV bytes per token of context and per sequence (io/kv_size.h) on the presets and the bundled model,
// against sums written out by layer count (docs/kv-records.md "Bytes per token"). CPU only.
#include <gtest/gtest.h>

#include <string>

#include "core/error.h"
#include "io/config.h"
#include "io/kv_size.h"
#include "io/presets.h"
#include "support/test_paths.h"

namespace dsv4 {
namespace {

TEST(KvSize, FlashCompactRecordsMeetTheTarget) {
  const ModelConfig c = preset_config("flash");
  const KvBytes k = kv_bytes(c, KvStorage::Compact);
  EXPECT_EQ(k.entry_bytes, 584);
  EXPECT_EQ(k.index_key_bytes, 68);
  // 21 CSA layers (ratio 4), 20 HCA layers (ratio 128), 2 sliding + the sliding MTP block.
  EXPECT_DOUBLE_EQ(k.entries_per_token, 21 * 584 / 4.0 + 20 * 584 / 128.0);  // 3066 + 91.25
  EXPECT_DOUBLE_EQ(k.index_keys_per_token, 21 * 68 / 4.0);                   // 357
  EXPECT_DOUBLE_EQ(k.per_token(), 3514.25);
  EXPECT_LE(k.per_token(), 3600.0);  // issue 15's target: <= 3.6 KB per token of context
  EXPECT_EQ(k.window_layers, 44);
  EXPECT_EQ(k.window_per_sequence, 44 * 128 * 584);
}

TEST(KvSize, FlashBf16RowsToday) {
  const KvBytes k = kv_bytes(preset_config("flash"), KvStorage::Bf16);
  EXPECT_EQ(k.entry_bytes, 1024);
  EXPECT_EQ(k.index_key_bytes, 256);
  EXPECT_DOUBLE_EQ(k.per_token(), 21 * 1024 / 4.0 + 20 * 1024 / 128.0 + 21 * 256 / 4.0);  // 6880
  EXPECT_EQ(k.window_per_sequence, 44 * 128 * 1024);
}

TEST(KvSize, Pro) {
  const ModelConfig c = preset_config("pro");
  // 30 CSA layers (2, 4, ..., 60), 31 HCA layers (0, 1, 3, ..., 59), the sliding MTP block.
  const KvBytes k = kv_bytes(c, KvStorage::Compact);
  EXPECT_DOUBLE_EQ(k.per_token(), 30 * 584 / 4.0 + 31 * 584 / 128.0 + 30 * 68 / 4.0);  // 5031.4375
  EXPECT_EQ(k.window_per_sequence, 62 * 128 * 584);
  EXPECT_DOUBLE_EQ(kv_bytes(c, KvStorage::Bf16).per_token(), 30 * 1024 / 4.0 + 31 * 1024 / 128.0 + 30 * 256 / 4.0);
}

TEST(KvSize, TruncatedFlashOfTheBench) {
  ModelConfig c = preset_config("flash");
  truncate_layers(c, 4);  // sliding, sliding, CSA, HCA; no MTP block
  const KvBytes k = kv_bytes(c, KvStorage::Compact);
  EXPECT_DOUBLE_EQ(k.per_token(), 584 / 4.0 + 584 / 128.0 + 68 / 4.0);
  EXPECT_EQ(k.window_layers, 4);
}

TEST(KvSize, BundledModel) {
  const ModelConfig c = load_config(test::bundled_model_dir());
  // d 128, r 64: 64 codes + 128 rope bytes + 1 scale -> 200; 2 CSA (ratio 4), 2 HCA (ratio 32); window 32.
  const KvBytes k = kv_bytes(c, KvStorage::Compact);
  EXPECT_EQ(k.entry_bytes, 200);
  EXPECT_DOUBLE_EQ(k.per_token(), 2 * 200 / 4.0 + 2 * 200 / 32.0 + 2 * 68 / 4.0);  // 146.5
  EXPECT_EQ(k.window_per_sequence, (6 + 1) * 32 * 200);  // 6 layers and the mtp.0 block's ring
  EXPECT_DOUBLE_EQ(kv_bytes(c, KvStorage::Bf16).per_token(), 2 * 256 / 4.0 + 2 * 256 / 32.0 + 2 * 256 / 4.0);
}

TEST(KvSize, NoIndexerKeysWithoutCsaLayers) {
  ModelConfig c = preset_config("flash");
  truncate_layers(c, 2);  // two sliding layers
  c.index_head_dim = 100;  // not even looked at
  const KvBytes k = kv_bytes(c, KvStorage::Compact);
  EXPECT_EQ(k.index_key_bytes, 0);
  EXPECT_DOUBLE_EQ(k.per_token(), 0.0);
  EXPECT_EQ(k.window_per_sequence, 2 * 128 * 584);
}

TEST(KvSize, ShapesOffTheBlocksHaveNoCompactRecords) {
  ModelConfig c = preset_config("flash");
  c.rope_dim = 56;  // nope 456
  try {
    kv_bytes(c, KvStorage::Compact);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()),
              "preset:flash: no compact KV records for this shape: KV entry record: head_dim - rope_dim = 512 - 56 = "
              "456 must be a multiple of the FP8 block of 64");
  }
  EXPECT_DOUBLE_EQ(kv_bytes(c, KvStorage::Bf16).per_token(), 6880.0);  // bf16 rows exist for any shape
  c.rope_dim = 64;
  c.index_head_dim = 80;
  EXPECT_THROW(kv_bytes(c, KvStorage::Compact), Error);
}

}  // namespace
}  // namespace dsv4
