// FP8 activation quantization: bit-exact against core/quant.h act_quant_fp8 (codes and E8M0 scales),
// and the fp32 scales in cuBLASLt's block-major layout.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "backend/cuda/ops.h"
#include "core/quant.h"
#include "harness.h"

namespace dsv4::cuda::test {
namespace {

// bf16 data over a wide range of magnitudes, block by block: blocks below the amax floor, zeros and
// negative zeros, values that round to e4m3 subnormals and to zero.
std::vector<float> varied_bf16(Rng& rng, int64_t rows, int cols, int block) {
  std::vector<float> x(size_t(rows * cols));
  for (int64_t b = 0; b < rows * cols / block; ++b) {
    const int base = rng.uniform_int(-40, 12);
    for (int i = 0; i < block; ++i) {
      float v = std::ldexp(rng.uniform(0.0f, 1.0f), base - rng.uniform_int(0, 14));
      if (rng.uniform_int(0, 1)) v = -v;
      const int z = rng.uniform_int(0, 40);
      if (z == 0) v = 0.0f;
      if (z == 1) v = -0.0f;
      x[size_t(b * block + i)] = dsv4::round_bf16(v);
    }
  }
  return x;
}

// pad: extra elements per input row (x_stride = cols + pad; a stride that is not a multiple of 8 takes the
// kernel's narrow loads instead of the 16-byte ones).
void check_act_quant(int64_t rows, int cols, int block, uint64_t seed, int pad = 0) {
  DeviceContext ctx;
  Rng rng(seed);
  std::vector<float> x = varied_bf16(rng, rows, cols, block);
  const int nb = cols / block;
  std::vector<float> xp(size_t(rows * (cols + pad)), 0.0f);
  for (int64_t r = 0; r < rows; ++r)
    std::copy(x.begin() + r * cols, x.begin() + (r + 1) * cols, xp.begin() + r * (cols + pad));
  auto dx = upload_bf16(xp);
  Guarded<uint8_t> codes(size_t(rows * cols));
  Guarded<uint8_t> e8(size_t(rows * nb));
  Guarded<float> sf(size_t(rows * nb));

  ActQuantParams p;
  p.x = reinterpret_cast<const bf16*>(dx.get());
  p.codes = codes.get();
  p.scale_e8m0 = e8.get();
  p.scale_f32 = sf.get();
  p.rows = rows;
  p.cols = cols;
  p.block = block;
  p.x_stride = cols + pad;
  p.codes_stride = cols;
  p.e8m0_stride = nb;
  p.sf_row_stride = 1;  // cuBLASLt VEC128 layout: block-major
  p.sf_block_stride = rows;
  act_quant_fp8(ctx, p);
  ctx.synchronize();

  std::vector<uint8_t> ref_codes(size_t(rows * cols)), ref_e8(size_t(rows * nb));
  dsv4::act_quant_fp8(x.data(), rows * cols, block, ref_codes.data(), ref_e8.data());

  const std::vector<uint8_t> got_codes = codes.download("codes"), got_e8 = e8.download("e8m0");
  const std::vector<float> got_sf = sf.download("scale_f32");
  size_t code_diff = 0, scale_diff = 0, sf_diff = 0, first = SIZE_MAX;
  for (size_t i = 0; i < got_codes.size(); ++i)
    if (got_codes[i] != ref_codes[i]) {
      if (first == SIZE_MAX) first = i;
      ++code_diff;
    }
  for (int64_t r = 0; r < rows; ++r)
    for (int b = 0; b < nb; ++b) {
      const uint8_t want = ref_e8[size_t(r * nb + b)];
      scale_diff += got_e8[size_t(r * nb + b)] != want;
      sf_diff += got_sf[size_t(b * rows + r)] != e8m0_to_f32(want);
    }
  std::printf("[act_quant_fp8 rows=%lld cols=%d block=%d] code mismatches %zu / %zu, e8m0 mismatches %zu / %lld, "
              "f32 scale mismatches %zu%s\n",
              (long long)rows, cols, block, code_diff, got_codes.size(), scale_diff, (long long)(rows * nb), sf_diff,
              code_diff + scale_diff + sf_diff == 0 ? " PASS (bit-exact)" : " FAIL");
  EXPECT_EQ(code_diff, 0u) << "first mismatch at " << first << ": x=" << x[first] << " got 0x" << std::hex
                           << int(got_codes[first == SIZE_MAX ? 0 : first]) << " want 0x"
                           << int(ref_codes[first == SIZE_MAX ? 0 : first]);
  EXPECT_EQ(scale_diff, 0u);
  EXPECT_EQ(sf_diff, 0u);
}

TEST(CudaActQuant, LinearInputBlocks128BitExact) {
  DSV4_REQUIRE_HOPPER();
  check_act_quant(9, 4096, 128, 21);
  check_act_quant(1, 1024, 128, 22);
  check_act_quant(200, 8192, 128, 23);
  check_act_quant(3, 384, 128, 25);     // 9 blocks: the last warp's upper half past the end
  check_act_quant(5, 512, 128, 26, 4);  // a row stride of 516: the narrow loads
}
TEST(CudaActQuant, KvBlocks64BitExact) {
  DSV4_REQUIRE_HOPPER();
  check_act_quant(33, 448, 64, 24);
}

}  // namespace
}  // namespace dsv4::cuda::test
