// dequantize_fp8_weight (fp8_dequant.h) against its CPU twin: io/weights.h dequantize() rounded to bf16,
// bit for bit, on checkpoint-style weights (random e4m3 codes, E8M0 scales; rows and inputs that are not
// whole 128 x 128 blocks included), and its one-line errors.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "backend/cuda/buffer.h"
#include "backend/cuda/context.h"
#include "backend/cuda/fp8_dequant.h"
#include "core/error.h"
#include "fp8_host.h"
#include "harness.h"

namespace dsv4::cuda::test {
namespace {

TEST(CudaFp8Dequant, MatchesTheHostDequantizeBitForBit) {
  DSV4_REQUIRE_HOPPER();
  DeviceContext ctx;
  Rng rng(71);
  for (auto [out, in] : {std::pair<int64_t, int64_t>{256, 512}, {200, 272}, {8, 16}, {1024, 4096}}) {
    const HostFp8 hw = make_fp8(rng, out, in);
    const Fp8Weight w = upload_fp8_weight(hw.wv(), hw.sv());
    DeviceBuffer<bf16> y(size_t(out * in));
    dequantize_fp8_weight(ctx, w, y.get());
    ctx.synchronize();
    const std::vector<bf16> got = y.download();
    const std::vector<uint16_t> want = to_bf16(round_bf16(hw.dequantized()));
    ASSERT_EQ(got.size(), want.size());
    size_t bad = 0, first = 0;
    for (size_t i = 0; i < got.size(); ++i) {
      uint16_t g;
      std::memcpy(&g, &got[i], 2);
      if (g != want[i] && bad++ == 0) first = i;
    }
    EXPECT_EQ(bad, 0u) << out << " x " << in << ": first at row " << first / size_t(in) << ", column "
                       << first % size_t(in);
    if (out <= 128) continue;
    // Rows from 128 on (a piece of the weight, as attn_out widens a few groups of wo_a at a time).
    DeviceBuffer<bf16> part(size_t((out - 128) * in));
    dequantize_fp8_weight(ctx, w, part.get(), 128);
    ctx.synchronize();
    const std::vector<bf16> p = part.download();
    EXPECT_EQ(std::memcmp(p.data(), got.data() + 128 * in, p.size() * 2), 0) << out << " x " << in << " from row 128";
  }
}

TEST(CudaFp8Dequant, BadCallsAreOneLineErrors) {
  DSV4_REQUIRE_HOPPER();
  DeviceContext ctx;
  Rng rng(5);
  const HostFp8 hw = make_fp8(rng, 128, 128);
  const Fp8Weight w = upload_fp8_weight(hw.wv(), hw.sv());
  DeviceBuffer<bf16> y(size_t(128 * 128 + 8));
  EXPECT_THROW(dequantize_fp8_weight(ctx, w, nullptr), Error);
  EXPECT_THROW(dequantize_fp8_weight(ctx, Fp8Weight{}, y.get()), Error);
  EXPECT_THROW(dequantize_fp8_weight(ctx, w, y.get() + 1), Error);  // not 16-byte aligned
  EXPECT_THROW(dequantize_fp8_weight(ctx, w, y.get(), 64), Error);   // rows not from a 128-row block
  EXPECT_THROW(dequantize_fp8_weight(ctx, w, y.get(), 0, 129), Error);  // past the last row
}

}  // namespace
}  // namespace dsv4::cuda::test
