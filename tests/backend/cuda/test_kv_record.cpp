// The compact KV records on the GPU (backend/cuda/kv_record.h) against the CPU twins
// (backend/cpu/kv_record.h), bit for bit: pack of rows on the official grid and of raw rows, unpack of
// the twin's records, and the GPU round trip. Rows come in batches that leave a partial last block of
// warps, with strided inputs; records sit in guarded buffers.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "backend/cpu/kv_record.h"
#include "backend/cuda/kv_record.h"
#include "core/hadamard.h"
#include "core/quant.h"
#include "harness.h"

namespace dsv4::cuda::test {
namespace {

bf16* as_bf16(DeviceBuffer<uint16_t>& b) { return reinterpret_cast<bf16*>(b.get()); }
bf16* as_bf16(Guarded<uint16_t>& b) { return reinterpret_cast<bf16*>(b.get()); }

// bf16 rows [rows, stride] whose 32-blocks each draw their own magnitude (1e-6 .. 1e6: below the FP8
// amax floor up to large), with exact zeros and tiny negatives (they snap to -0).
std::vector<float> varied_rows(Rng& rng, int64_t rows, int64_t stride) {
  std::vector<float> x(size_t(rows * stride));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t b = 0; b < stride; b += 32) {
      const float sigma = std::pow(10.0f, rng.uniform(-6.0f, 6.0f));
      for (int64_t i = b; i < std::min(stride, b + 32); ++i) {
        const int pick = rng.uniform_int(0, 49);
        const float v = pick == 0 ? 0.0f : pick == 1 ? -sigma * 1e-6f : rng.normal(sigma);
        x[size_t(r * stride + i)] = dsv4::round_bf16(v);
      }
    }
  return x;
}

std::vector<uint8_t> words_to_bytes(const std::vector<uint32_t>& w) {
  std::vector<uint8_t> b(w.size() * 4);
  std::memcpy(b.data(), w.data(), b.size());
  return b;
}

// Byte arrays equal; the harness line reports the worst byte.
void expect_same_bytes(const std::string& what, const std::vector<uint8_t>& got, const std::vector<uint8_t>& want) {
  ASSERT_EQ(got.size(), want.size()) << what;
  compare(what, std::vector<float>(got.begin(), got.end()), std::vector<float>(want.begin(), want.end()), Tol::Exact);
  size_t bad = 0, first = got.size();
  for (size_t i = 0; i < got.size(); ++i)
    if (got[i] != want[i]) first = std::min(first, i), ++bad;
  EXPECT_EQ(bad, 0u) << what << ": " << bad << " bytes differ, first at " << first;
}

// bf16 bits equal to the twin's floats (which are bf16 values).
void expect_same_bf16(const std::string& what, const std::vector<uint16_t>& got, const std::vector<float>& want) {
  ASSERT_EQ(got.size(), want.size()) << what;
  compare(what, from_bf16(got), want, Tol::Exact);
  size_t bad = 0, first = got.size();
  for (size_t i = 0; i < got.size(); ++i)
    if (got[i] != dsv4::f32_to_bf16(want[i])) first = std::min(first, i), ++bad;
  EXPECT_EQ(bad, 0u) << what << ": " << bad << " values differ in their bits, first at " << first;
}

struct KvShape {
  int d, r;
};

TEST(CudaKvRecord, KvEntriesMatchTheCpuTwin) {
  DSV4_REQUIRE_HOPPER();
  DeviceContext ctx;
  Rng rng(151);
  for (KvShape s : {KvShape{512, 64}, KvShape{128, 64}, KvShape{192, 0}}) {
    const KvEntryLayout l = kv_entry_layout(s.d, s.r);
    const int64_t rows = 37, stride = s.d + 64;
    const std::string tag = "d " + std::to_string(s.d) + " r " + std::to_string(s.r);
    std::vector<float> raw = varied_rows(rng, rows, stride), grid = raw;
    for (int64_t r = 0; r < rows; ++r) fp8_sim(&grid[size_t(r * stride)], l.nope(), kFp8KvBlock);  // QuantSim::kv
    for (const auto& [name, x] : {std::pair{"grid", &grid}, std::pair{"raw", &raw}}) {
      std::vector<uint8_t> want(size_t(rows * l.bytes()));
      cpu::pack_kv_entries({.x = x->data(), .records = want.data(), .rows = rows, .x_stride = stride, .layout = l});
      auto dx = upload_bf16(*x);
      Guarded<uint32_t> rec(size_t(rows * l.bytes() / 4));
      pack_kv_entries(ctx, {.x = as_bf16(dx), .records = reinterpret_cast<uint8_t*>(rec.get()), .rows = rows,
                            .x_stride = stride, .layout = l});
      ctx.synchronize();
      const std::vector<uint8_t> got = words_to_bytes(rec.download("kv records"));
      expect_same_bytes("pack_kv_entries " + tag + " " + name, got, want);

      // unpack of the twin's records, and the twin's unpack of them.
      std::vector<float> back(size_t(rows * s.d));
      cpu::unpack_kv_entries({.records = want.data(), .x = back.data(), .rows = rows, .x_stride = s.d, .layout = l});
      DeviceBuffer<uint8_t> drec(want);
      Guarded<uint16_t> y(size_t(rows * s.d));
      unpack_kv_entries(ctx, {.records = drec.get(), .x = as_bf16(y), .rows = rows, .x_stride = s.d, .layout = l});
      ctx.synchronize();
      expect_same_bf16("unpack_kv_entries " + tag + " " + name, y.download("kv rows"), back);
    }
    // GPU round trip of the grid rows: the values the model attends over, exactly.
    auto dx = upload_bf16(grid);
    DeviceBuffer<uint8_t> drec(size_t(rows * l.bytes()));
    DeviceBuffer<uint16_t> dy(size_t(rows * stride));
    dy.fill_bytes(0);
    pack_kv_entries(ctx, {.x = as_bf16(dx), .records = drec.get(), .rows = rows, .x_stride = stride, .layout = l});
    unpack_kv_entries(ctx, {.records = drec.get(), .x = as_bf16(dy), .rows = rows, .x_stride = stride, .layout = l});
    ctx.synchronize();
    const std::vector<uint16_t> y = dy.download(), g16 = to_bf16(grid);
    size_t bad = 0;
    for (int64_t r = 0; r < rows; ++r)
      for (int i = 0; i < s.d; ++i) bad += y[size_t(r * stride + i)] != g16[size_t(r * stride + i)];
    EXPECT_EQ(bad, 0u) << tag << ": GPU unpack(pack(grid)) differs from the grid in " << bad << " values";
  }
}

TEST(CudaKvRecord, IndexerKeysMatchTheCpuTwin) {
  DSV4_REQUIRE_HOPPER();
  DeviceContext ctx;
  Rng rng(152);
  for (int dim : {128, 64, 32}) {
    const IndexerKeyLayout l = indexer_key_layout(dim);
    const int64_t rows = 45, stride = dim + 32;
    const std::string tag = "dI " + std::to_string(dim);
    std::vector<float> rotated = varied_rows(rng, rows, stride);
    for (int64_t r = 0; r < rows; ++r) hadamard_bf16_inplace(&rotated[size_t(r * stride)], dim);
    std::vector<float> grid = rotated;
    for (int64_t r = 0; r < rows; ++r) fp4_sim(&grid[size_t(r * stride)], dim, kFp4Block);  // QuantSim::indexer_key
    for (const auto& [name, x] : {std::pair{"grid", &grid}, std::pair{"rotated", &rotated}}) {
      std::vector<uint8_t> want(size_t(rows * l.bytes()));
      cpu::pack_indexer_keys({.x = x->data(), .records = want.data(), .rows = rows, .x_stride = stride, .layout = l});
      auto dx = upload_bf16(*x);
      Guarded<uint32_t> rec(size_t(rows * l.bytes() / 4));
      pack_indexer_keys(ctx, {.x = as_bf16(dx), .records = reinterpret_cast<uint8_t*>(rec.get()), .rows = rows,
                              .x_stride = stride, .layout = l});
      ctx.synchronize();
      expect_same_bytes("pack_indexer_keys " + tag + " " + name, words_to_bytes(rec.download("key records")), want);

      std::vector<float> back(size_t(rows * dim));
      cpu::unpack_indexer_keys({.records = want.data(), .x = back.data(), .rows = rows, .x_stride = dim, .layout = l});
      DeviceBuffer<uint8_t> drec(want);
      Guarded<uint16_t> y(size_t(rows * dim));
      unpack_indexer_keys(ctx, {.records = drec.get(), .x = as_bf16(y), .rows = rows, .x_stride = dim, .layout = l});
      ctx.synchronize();
      expect_same_bf16("unpack_indexer_keys " + tag + " " + name, y.download("key rows"), back);
    }
  }
}

TEST(CudaKvRecord, FloorScalesAndSubnormalKeys) {
  // Blocks below the amax floors (FP8 scale 2^-22; FP4 scale 2^-126 with the subnormal half code 2^-127).
  DSV4_REQUIRE_HOPPER();
  DeviceContext ctx;
  const KvEntryLayout kl = kv_entry_layout(128, 64);
  std::vector<float> kx(128, 0.0f);
  kx[0] = 5e-5f, kx[1] = -1e-6f, kx[64] = 0x1p-130f;
  fp8_sim(kx.data(), 64, kFp8KvBlock);
  std::vector<uint8_t> kwant(size_t(kl.bytes()));
  cpu::pack_kv_entries({.x = kx.data(), .records = kwant.data(), .rows = 1, .x_stride = 128, .layout = kl});
  auto dkx = upload_bf16(kx);
  Guarded<uint32_t> krec(size_t(kl.bytes() / 4));
  pack_kv_entries(ctx, {.x = as_bf16(dkx), .records = reinterpret_cast<uint8_t*>(krec.get()), .rows = 1,
                        .x_stride = 128, .layout = kl});
  ctx.synchronize();
  expect_same_bytes("pack_kv_entries floor", words_to_bytes(krec.download("kv record")), kwant);

  const IndexerKeyLayout il = indexer_key_layout(32);
  std::vector<float> ix(32, 0.0f);
  ix[0] = 6 * 0x1p-126f, ix[1] = -0x1p-127f, ix[2] = 0x1p-126f;
  fp4_sim(ix.data(), 32);
  std::vector<uint8_t> iwant(size_t(il.bytes()));
  cpu::pack_indexer_keys({.x = ix.data(), .records = iwant.data(), .rows = 1, .x_stride = 32, .layout = il});
  auto dix = upload_bf16(ix);
  Guarded<uint32_t> irec(size_t(il.bytes() / 4));
  pack_indexer_keys(ctx, {.x = as_bf16(dix), .records = reinterpret_cast<uint8_t*>(irec.get()), .rows = 1,
                          .x_stride = 32, .layout = il});
  ctx.synchronize();
  expect_same_bytes("pack_indexer_keys floor", words_to_bytes(irec.download("key record")), iwant);
  DeviceBuffer<uint8_t> drec(iwant);
  Guarded<uint16_t> y(32);
  unpack_indexer_keys(ctx, {.records = drec.get(), .x = as_bf16(y), .rows = 1, .x_stride = 32, .layout = il});
  ctx.synchronize();
  expect_same_bf16("unpack_indexer_keys subnormal", y.download("key row"), ix);
}

TEST(CudaKvRecord, BadParametersAreOneLineErrors) {
  DSV4_REQUIRE_HOPPER();
  DeviceContext ctx;
  const KvEntryLayout l = kv_entry_layout(128, 64);
  DeviceBuffer<uint16_t> x(1024);
  DeviceBuffer<uint8_t> rec(1024);
  auto expect_error = [](auto f, const std::string& part) {
    try {
      f();
      ADD_FAILURE() << "no error; expected '" << part << "'";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
    }
  };
  expect_error([&] { pack_kv_entries(ctx, {.x = as_bf16(x), .records = rec.get(), .rows = 1, .x_stride = 100,
                                           .layout = {.head_dim = 100, .rope_dim = 0}}); },
               "pack_kv_entries: KV entry record: head_dim - rope_dim = 100 - 0 = 100 must be a multiple");
  expect_error([&] { pack_indexer_keys(ctx, {.x = as_bf16(x), .records = rec.get(), .rows = 1, .x_stride = 48,
                                             .layout = {.dim = 48}}); },
               "must be a multiple of the FP4 block of 32");
  expect_error([&] { pack_kv_entries(ctx, {.x = as_bf16(x), .records = rec.get(), .rows = 2, .x_stride = 129,
                                           .layout = l}); },
               "even row stride");
  expect_error([&] { unpack_kv_entries(ctx, {.records = rec.get() + 4, .x = as_bf16(x), .rows = 1, .x_stride = 128,
                                             .layout = l}); },
               "records must be 8-byte aligned");
  expect_error([&] { pack_kv_entries(ctx, {.x = as_bf16(x) + 1, .records = rec.get(), .rows = 1, .x_stride = 128,
                                           .layout = l}); },
               "4-byte aligned");
  // An empty batch launches nothing.
  pack_kv_entries(ctx, {.x = nullptr, .records = nullptr, .rows = 0, .x_stride = 0, .layout = l});
  ctx.synchronize();
}

}  // namespace
}  // namespace dsv4::cuda::test
