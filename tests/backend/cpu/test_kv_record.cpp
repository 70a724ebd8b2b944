// The compact KV records (docs/kv-records.md): layouts, records written out by hand, exact round trips of
// rows put on the official grid by QuantSim, and the errors for widths off the blocks. CPU only.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "backend/cpu/kv_record.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/hadamard.h"
#include "core/kv_record_layout.h"
#include "backend/cpu/quantize.h"

namespace dsv4 {
namespace {

// Float arrays equal bit for bit (so -0 vs +0 and NaN patterns count); reports the first difference.
void expect_bits_equal(const std::vector<float>& got, const std::vector<float>& want, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) {
    uint32_t a, b;
    std::memcpy(&a, &got[i], 4);
    std::memcpy(&b, &want[i], 4);
    if (a != b) {
      ADD_FAILURE() << what << ": element " << i << " is " << got[i] << " (0x" << std::hex << a << "), expected "
                    << want[i] << " (0x" << b << ")";
      return;
    }
  }
}

std::vector<uint8_t> pack_kv(const KvEntryLayout& l, const std::vector<float>& x, int64_t rows, int64_t stride) {
  std::vector<uint8_t> rec(size_t(rows * l.bytes()), 0xee);
  cpu::pack_kv_entries({.x = x.data(), .records = rec.data(), .rows = rows, .x_stride = stride, .layout = l});
  return rec;
}
std::vector<float> unpack_kv(const KvEntryLayout& l, const std::vector<uint8_t>& rec, int64_t rows) {
  std::vector<float> x(size_t(rows * l.head_dim), -1.0f);
  cpu::unpack_kv_entries({.records = rec.data(), .x = x.data(), .rows = rows, .x_stride = l.head_dim, .layout = l});
  return x;
}
std::vector<uint8_t> pack_idx(const IndexerKeyLayout& l, const std::vector<float>& x, int64_t rows) {
  std::vector<uint8_t> rec(size_t(rows * l.bytes()), 0xee);
  cpu::pack_indexer_keys({.x = x.data(), .records = rec.data(), .rows = rows, .x_stride = l.dim, .layout = l});
  return rec;
}
std::vector<float> unpack_idx(const IndexerKeyLayout& l, const std::vector<uint8_t>& rec, int64_t rows) {
  std::vector<float> x(size_t(rows * l.dim), -1.0f);
  cpu::unpack_indexer_keys({.records = rec.data(), .x = x.data(), .rows = rows, .x_stride = l.dim, .layout = l});
  return x;
}

// Rows of bf16 values whose 64-blocks span many magnitudes (each block its own sigma, from 1e-6 — below
// the FP8 amax floor — to 1e6), with exact zeros and tiny negatives that snap to -0.
std::vector<float> varied_rows(int64_t rows, int64_t dim, uint64_t seed) {
  std::mt19937_64 gen(seed);
  std::vector<float> x(size_t(rows * dim));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t b = 0; b < dim; b += 32) {
      const float sigma = std::pow(10.0f, std::uniform_real_distribution<float>(-6.0f, 6.0f)(gen));
      std::normal_distribution<float> nd(0.0f, sigma);
      for (int64_t i = b; i < std::min(dim, b + 32); ++i) {
        float v = nd(gen);
        const int pick = int(gen() % 50);
        if (pick == 0) v = 0.0f;
        if (pick == 1) v = -sigma * 1e-6f;
        x[size_t(r * dim + i)] = round_bf16(v);
      }
    }
  return x;
}

const QuantSim kOfficial(Numerics::Official);

// ---- layouts

TEST(KvRecordLayout, FlashEntryIs584Bytes) {
  const KvEntryLayout l = kv_entry_layout(512, 64);
  EXPECT_EQ(l.nope(), 448);
  EXPECT_EQ(l.blocks(), 7);
  EXPECT_EQ(l.codes_offset(), 0);
  EXPECT_EQ(l.rope_offset(), 448);
  EXPECT_EQ(l.scales_offset(), 576);
  EXPECT_EQ(l.used_bytes(), 583);
  EXPECT_EQ(l.bytes(), 584);  // MODEL.md §6: 448 e4m3 + 64 bf16 + 7 UE8M0 + 1 pad
}

TEST(KvRecordLayout, OtherWidths) {
  const KvEntryLayout tiny = kv_entry_layout(128, 64);  // the bundled model
  EXPECT_EQ(tiny.scales_offset(), 192);
  EXPECT_EQ(tiny.bytes(), 200);  // 64 + 128 + 1 -> padded to 8
  const KvEntryLayout no_rope = kv_entry_layout(192, 0);
  EXPECT_EQ(no_rope.scales_offset(), 192);
  EXPECT_EQ(no_rope.bytes(), 200);  // 192 + 3 -> 200
  EXPECT_EQ(kv_entry_layout(136, 8).bytes(), 152);  // 128 + 16 + 2 = 146 -> 152
}

TEST(KvRecordLayout, IndexerKeys) {
  const IndexerKeyLayout l = indexer_key_layout(128);
  EXPECT_EQ(l.blocks(), 4);
  EXPECT_EQ(l.scales_offset(), 64);
  EXPECT_EQ(l.bytes(), 68);  // MODEL.md §6: MXFP4, 64 B + 4 B scales
  EXPECT_EQ(indexer_key_layout(32).bytes(), 20);  // 16 + 1 -> 20
  EXPECT_EQ(indexer_key_layout(64).bytes(), 36);  // 32 + 2 -> 36
  EXPECT_EQ(indexer_key_layout(256).bytes(), 136);
}

// ---- errors

template <typename F>
void expect_error(F f, const std::string& part) {
  try {
    f();
    ADD_FAILURE() << "no error; expected one containing '" << part << "'";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
    EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos) << e.what();
  }
}

TEST(KvRecordErrors, WidthsOffTheBlocks) {
  expect_error([] { kv_entry_layout(512, 60); }, "512 - 60 = 452 must be a multiple of the FP8 block of 64");
  expect_error([] { kv_entry_layout(64, 8); }, "= 56 must be a multiple");  // tiny-a's shape
  expect_error([] { kv_entry_layout(96, 0); }, "multiple of the FP8 block");
  expect_error([] { kv_entry_layout(64, 64); }, "rope_dim must be in [0, head_dim = 64), got 64");
  expect_error([] { kv_entry_layout(512, -2); }, "rope_dim must be in");
  expect_error([] { kv_entry_layout(0, 0); }, "head_dim must be in [1, 65536], got 0");
  expect_error([] { indexer_key_layout(100); }, "dim 100 must be a multiple of the FP4 block of 32");
  expect_error([] { indexer_key_layout(16); }, "multiple of the FP4 block");
  expect_error([] { indexer_key_layout(0); }, "dim must be in [1, 65536], got 0");
}

TEST(KvRecordErrors, HandBuiltLayoutsAreChecked) {
  std::vector<float> x(128);
  std::vector<uint8_t> rec(256);
  expect_error([&] { cpu::pack_kv_entries({.x = x.data(), .records = rec.data(), .rows = 1, .x_stride = 100,
                                           .layout = {.head_dim = 100, .rope_dim = 0}}); },
               "pack_kv_entries: KV entry record: head_dim - rope_dim = 100 - 0 = 100 must be a multiple");
  expect_error([&] { cpu::unpack_kv_entries({.records = rec.data(), .x = x.data(), .rows = 1, .x_stride = 72,
                                             .layout = {.head_dim = 72, .rope_dim = 16}}); },
               "unpack_kv_entries: ");
  expect_error([&] { cpu::pack_indexer_keys({.x = x.data(), .records = rec.data(), .rows = 1, .x_stride = 48,
                                             .layout = {.dim = 48}}); },
               "pack_indexer_keys: indexer key record: dim 48 must be a multiple of the FP4 block of 32");
  expect_error([&] { cpu::unpack_indexer_keys({.records = rec.data(), .x = x.data(), .rows = 1, .x_stride = 0,
                                               .layout = {.dim = 0}}); },
               "unpack_indexer_keys: ");
  expect_error([&] { cpu::pack_kv_entries({.x = nullptr, .records = rec.data(), .rows = 1, .x_stride = 128,
                                           .layout = kv_entry_layout(128, 64)}); },
               "null row or record pointer");
  expect_error([&] { cpu::pack_kv_entries({.x = x.data(), .records = rec.data(), .rows = 2, .x_stride = 64,
                                           .layout = kv_entry_layout(128, 64)}); },
               "row stride 64 is below the row width 128");
  expect_error([&] { cpu::unpack_indexer_keys({.records = rec.data(), .x = x.data(), .rows = -1, .x_stride = 32,
                                               .layout = indexer_key_layout(32)}); },
               "negative row count -1");
}

// ---- records written out by hand

TEST(KvRecordBytes, HandWrittenKvEntry) {
  // d 128, r 64: one 64-block of nope dims. amax 3.5: p = fl32(3.5 * fl32(1/448)) = 2^-7 exactly, so the
  // scale is 2^-7 (E8M0 byte 127 - 7 = 120) and the codes are x * 128.
  const KvEntryLayout l = kv_entry_layout(128, 64);
  std::vector<float> x(128, 0.0f);
  x[0] = 3.5f;               // 448       -> 0 1111 110 = 0x7e
  x[1] = 1.0f;               // 128 = 2^7 -> 0 1110 000 = 0x70
  x[2] = -0.5f;              // -64       -> 1 1101 000 = 0xe8
  x[3] = -0.0f;              //           -> 0x80
  x[4] = 0x1p-16f;           // 2^-9, the smallest subnormal code -> 0x01
  x[5] = 3 * 0x1p-16f;       // 3 * 2^-9  -> 0x03
  x[6] = 1.25f;              // 160 = 1.25 * 2^7  -> 0 1110 010 = 0x72
  x[7] = -1.875f;            // -240 = -1.875 * 2^7 -> 1 1110 111 = 0xf7
  x[64] = 1.0f;              // bf16 0x3f80
  x[65] = -2.0f;             // bf16 0xc000
  x[66] = 1.0f / 3.0f;       // f32 0x3eaaaaab -> bf16 RNE 0x3eab (pack rounds the rope dims to bf16)
  x[127] = -0x1p-100f;       // bf16 0x8d80
  std::vector<uint8_t> want(200, 0);
  const uint8_t codes[8] = {0x7e, 0x70, 0xe8, 0x80, 0x01, 0x03, 0x72, 0xf7};
  std::memcpy(want.data(), codes, 8);
  want[64 + 0] = 0x80, want[64 + 1] = 0x3f;  // little-endian bf16 at offset 64 + 2i
  want[64 + 2] = 0x00, want[64 + 3] = 0xc0;
  want[64 + 4] = 0xab, want[64 + 5] = 0x3e;
  want[64 + 126] = 0x80, want[64 + 127] = 0x8d;
  want[192] = 120;  // the one scale byte; 193..199 padding (zero)
  const std::vector<uint8_t> got = pack_kv(l, x, 1, 128);
  for (size_t i = 0; i < want.size(); ++i) EXPECT_EQ(int(got[i]), int(want[i])) << "byte " << i;

  std::vector<float> back = x;
  back[66] = 0.333984375f;  // the bf16 value of 1/3
  expect_bits_equal(unpack_kv(l, want, 1), back, "unpack of the hand-written record");
}

TEST(KvRecordBytes, HandWrittenIndexerKey) {
  // dI 64: two 32-blocks. Block 0 amax 6: p = fl32(6 * fl32(1/6)) = 1, scale 1 (byte 127). Block 1 amax
  // 0.75: p = 0.125, scale 2^-3 (byte 124), codes x * 8.
  const IndexerKeyLayout l = indexer_key_layout(64);
  std::vector<float> x(64, 0.0f);
  x[0] = 6.0f;      // code 7
  x[1] = -1.5f;     // 8 | 3 = 0xb
  x[2] = 0.5f;      // 1
  x[3] = 4.0f;      // 6
  x[4] = -3.0f;     // 8 | 5 = 0xd
  x[32] = 0.75f;    // 6   -> 7
  x[33] = 0.25f;    // 2   -> 4
  x[34] = -0.0625f; // -.5 -> 9
  x[35] = 0.1875f;  // 1.5 -> 3
  std::vector<uint8_t> want(36, 0);
  want[0] = 0xb7;  // element 0 in the low nibble, element 1 in the high one
  want[1] = 0x61;
  want[2] = 0x0d;
  want[16] = 0x47;
  want[17] = 0x39;
  want[32] = 127, want[33] = 124;  // scales; 34, 35 padding
  const std::vector<uint8_t> got = pack_idx(l, x, 1);
  for (size_t i = 0; i < want.size(); ++i) EXPECT_EQ(int(got[i]), int(want[i])) << "byte " << i;
  expect_bits_equal(unpack_idx(l, want, 1), x, "unpack of the hand-written key");
}

TEST(KvRecordBytes, RepackOfAGridRowMayHalveTheScaleLosslessly) {
  // 228 snaps to 224 with scale 1 (byte 127); the grid row's amax 224 gives p = 0.5, so pack picks scale
  // 1/2 (byte 126) and code 448 (0x7e): other bytes than the first quantization, the same values.
  const KvEntryLayout l = kv_entry_layout(64, 0);
  std::vector<float> x(64, 0.0f);
  x[0] = 228.0f;
  x[1] = -3.0f;
  std::vector<float> grid = x;
  kOfficial.kv(grid.data(), 64);
  ASSERT_EQ(grid[0], 224.0f);
  const std::vector<uint8_t> direct = pack_kv(l, x, 1, 64), repacked = pack_kv(l, grid, 1, 64);
  EXPECT_EQ(int(direct[64]), 127);
  EXPECT_EQ(int(repacked[64]), 126);
  EXPECT_EQ(int(repacked[0]), 0x7e);
  expect_bits_equal(unpack_kv(l, direct, 1), grid, "unpack(pack(x))");
  expect_bits_equal(unpack_kv(l, repacked, 1), grid, "unpack(pack(grid))");
}

// ---- round trips

struct KvCase {
  int d, r;
};

TEST(KvRecordRoundTrip, KvEntriesOnTheGridComeBackBitForBit) {
  for (KvCase c : {KvCase{512, 64}, KvCase{128, 64}, KvCase{192, 0}, KvCase{136, 8}}) {
    const KvEntryLayout l = kv_entry_layout(c.d, c.r);
    const int64_t rows = 300;
    std::vector<float> x = varied_rows(rows, c.d, 1000 + c.d + c.r);
    std::vector<float> grid = x;
    for (int64_t r = 0; r < rows; ++r) kOfficial.kv(&grid[size_t(r * c.d)], l.nope());
    const std::string what = "d " + std::to_string(c.d) + " r " + std::to_string(c.r);
    const std::vector<uint8_t> rec = pack_kv(l, grid, rows, c.d);
    expect_bits_equal(unpack_kv(l, rec, rows), grid, what + ": unpack(pack(grid))");
    // pack is the quantizer: from the raw rows it lands on the same values.
    expect_bits_equal(unpack_kv(l, pack_kv(l, x, rows, c.d), rows), grid, what + ": unpack(pack(x))");
    for (int64_t r = 0; r < rows; ++r)
      for (int i = l.used_bytes(); i < l.bytes(); ++i) ASSERT_EQ(rec[size_t(r * l.bytes() + i)], 0) << what;
  }
}

TEST(KvRecordRoundTrip, StridedRowsPackLikeSingleRows) {
  const KvEntryLayout l = kv_entry_layout(512, 64);
  const int64_t rows = 5, stride = 600;
  std::vector<float> x = varied_rows(rows, stride, 7);
  for (int64_t r = 0; r < rows; ++r) kOfficial.kv(&x[size_t(r * stride)], l.nope());
  const std::vector<uint8_t> all = pack_kv(l, x, rows, stride);
  for (int64_t r = 0; r < rows; ++r) {
    std::vector<float> row(x.begin() + r * stride, x.begin() + r * stride + 512);
    const std::vector<uint8_t> one = pack_kv(l, row, 1, 512);
    EXPECT_TRUE(std::equal(one.begin(), one.end(), all.begin() + r * l.bytes())) << "row " << r;
  }
}

TEST(KvRecordRoundTrip, IndexerKeysOnTheGridComeBackBitForBit) {
  for (int dim : {128, 64, 32, 256}) {
    const IndexerKeyLayout l = indexer_key_layout(dim);
    const int64_t rows = 400;
    std::vector<float> x = varied_rows(rows, dim, 2000 + dim);
    std::vector<float> grid = x;
    for (int64_t r = 0; r < rows; ++r) kOfficial.indexer_key(&grid[size_t(r * dim)], dim);  // Hadamard + FP4
    const std::string what = "dI " + std::to_string(dim);
    const std::vector<uint8_t> rec = pack_idx(l, grid, rows);
    expect_bits_equal(unpack_idx(l, rec, rows), grid, what + ": unpack(pack(key))");
    // From rotated but unquantized keys, pack lands on fp4_sim's values.
    std::vector<float> rotated = x;
    for (int64_t r = 0; r < rows; ++r) hadamard_bf16_inplace(&rotated[size_t(r * dim)], dim);
    expect_bits_equal(unpack_idx(l, pack_idx(l, rotated, rows), rows), grid, what + ": unpack(pack(rotated))");
  }
}

TEST(KvRecordRoundTrip, FloorAndSubnormalScales) {
  // Blocks below the amax floors: FP8 scale 2^-22 (byte 105) for amax < 1e-4; FP4 scale 2^-126 (byte 1),
  // whose half code is the fp32 subnormal 2^-127.
  const KvEntryLayout kl = kv_entry_layout(64, 0);
  std::vector<float> kx(64, 0.0f);
  kx[0] = 5e-5f;
  kx[1] = -1e-6f;
  kOfficial.kv(kx.data(), 64);
  const std::vector<uint8_t> krec = pack_kv(kl, kx, 1, 64);
  EXPECT_EQ(int(krec[64]), 105);
  expect_bits_equal(unpack_kv(kl, krec, 1), kx, "fp8 floor");

  const IndexerKeyLayout il = indexer_key_layout(32);
  std::vector<float> ix(32, 0.0f);
  ix[0] = 6 * 0x1p-126f;
  ix[1] = -0x1p-127f;
  ix[2] = 0x1p-126f;
  fp4_sim(ix.data(), 32);
  ASSERT_EQ(ix[1], -0x1p-127f);
  const std::vector<uint8_t> irec = pack_idx(il, ix, 1);
  EXPECT_EQ(int(irec[16]), 1);
  EXPECT_EQ(int(irec[0]), 0x97);  // 6 -> 7 low, -0.5 -> 9 high
  expect_bits_equal(unpack_idx(il, irec, 1), ix, "fp4 floor");
}

}  // namespace
}  // namespace dsv4
