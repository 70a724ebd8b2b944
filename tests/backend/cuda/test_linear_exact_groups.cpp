// exact_linear's group mode (linear_exact.h) against cpu::matmul per group, bit for bit: the grouped
// wo_a layout (group g reads heads [g*gin, (g+1)*gin) of each token's row and writes columns
// [g*ro, (g+1)*ro) of z) with bf16 operands, and FP8 weights x FP8 activations with per-group scale
// offsets; every kernel (auto, tiled, streaming) and token counts across their tilings.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "backend/cpu/ops.h"
#include "backend/cuda/check.h"
#include "backend/cuda/linear_exact.h"
#include "backend/cuda/ops.h"
#include "core/dtype.h"
#include "core/quant.h"
#include "harness.h"

namespace dsv4::cuda::test {
namespace {

constexpr ExactLinearKernel kKernels[] = {ExactLinearKernel::Auto, ExactLinearKernel::Tiled, ExactLinearKernel::Gemv};
const char* kernel_name(ExactLinearKernel k) {
  return k == ExactLinearKernel::Tiled ? "tiled" : k == ExactLinearKernel::Gemv ? "gemv" : "auto";
}

// x [T, G*gin], W [G, ro, gin] -> z [T, G*ro]; fp8: weights e4m3 with power-of-two fp32 scale grids per
// group, activations quantized on the GPU in 128-blocks (gin a multiple of 128).
void check_groups(int64_t G, int64_t ro, int64_t gin, int64_t T, bool fp8, uint64_t seed) {
  DeviceContext ctx;
  Rng rng(seed);
  const int64_t in_all = G * gin, out_all = G * ro;
  std::vector<float> x = rng.bf16_normal(size_t(T * in_all));
  auto dx = upload_bf16(x);
  ExactLinearParams p;
  std::vector<float> wref(size_t(G * ro * gin)), xref = x;
  DeviceBuffer<uint16_t> dw16;
  DeviceBuffer<uint8_t> dw8, xc;
  DeviceBuffer<float> dws, xs;
  const int64_t nb = gin / 128, nb_all = in_all / 128, sld = (nb + 3) / 4 * 4, sro = (ro + 127) / 128;
  if (!fp8) {
    wref = rng.bf16_normal(wref.size(), 0.05f);
    dw16 = upload_bf16(wref);
    p.w16 = reinterpret_cast<const bf16*>(dw16.get());
    p.x = reinterpret_cast<const bf16*>(dx.get());
  } else {
    std::vector<uint8_t> codes(wref.size());
    std::vector<float> scales(size_t(G * sro * sld), 0.0f);
    for (auto& c : codes) {
      c = uint8_t(rng.uniform_int(0, 255));
      if ((c & 0x7f) == 0x7f) c ^= 1;  // no NaN codes
    }
    for (int64_t g = 0; g < G; ++g)
      for (int64_t rb = 0; rb < sro; ++rb)
        for (int64_t b = 0; b < nb; ++b)
          scales[size_t((g * sro + rb) * sld + b)] = std::ldexp(1.0f, rng.uniform_int(-10, -6));
    for (int64_t g = 0; g < G; ++g)
      for (int64_t r = 0; r < ro; ++r)
        for (int64_t k = 0; k < gin; ++k) {
          const size_t i = size_t((g * ro + r) * gin + k);
          wref[i] = e4m3_to_f32(codes[i]) * scales[size_t((g * sro + r / 128) * sld + k / 128)];
        }
    dw8 = DeviceBuffer<uint8_t>(codes);
    dws = DeviceBuffer<float>(scales);
    p.w8 = dw8.get();
    p.w_scales = dws.get();
    p.w_scale_ld = sld;
    p.ws_expert_stride = sro * sld;
    xc = DeviceBuffer<uint8_t>(size_t(T * in_all));
    xs = DeviceBuffer<float>(size_t(T * nb_all));
    ActQuantParams q;
    q.x = reinterpret_cast<const bf16*>(dx.get());
    q.codes = xc.get();
    q.scale_f32 = xs.get();
    q.rows = T;
    q.cols = int(in_all);
    q.block = 128;
    q.x_stride = q.codes_stride = in_all;
    q.sf_row_stride = nb_all;
    q.sf_block_stride = 1;
    act_quant_fp8(ctx, q);
    p.x_codes = xc.get();
    p.x_scales = xs.get();
    p.xs_row_stride = nb_all;
    p.xs_block_stride = 1;
    p.xs_group_stride = nb;
    fp8_sim(xref.data(), int64_t(xref.size()), 128);
  }
  Guarded<uint16_t> z(size_t(T * out_all));
  p.x_stride = in_all;
  p.x_group_stride = gin;
  p.w_expert_stride = ro * gin;
  p.y = reinterpret_cast<bf16*>(z.get());
  p.y_stride = out_all;
  p.y_group_stride = ro;
  p.groups = int(G);
  p.tokens = T;
  p.out = int(ro);
  p.in = int(gin);

  std::vector<float> ref(size_t(T * out_all)), xg(size_t(T * gin)), yg(size_t(T * ro));
  for (int64_t g = 0; g < G; ++g) {
    for (int64_t t = 0; t < T; ++t)
      for (int64_t k = 0; k < gin; ++k) xg[size_t(t * gin + k)] = xref[size_t(t * in_all + g * gin + k)];
    cpu::matmul(xg.data(), T, gin, wref.data() + g * ro * gin, ro, yg.data());
    for (int64_t t = 0; t < T; ++t)
      for (int64_t r = 0; r < ro; ++r) ref[size_t(t * out_all + g * ro + r)] = yg[size_t(t * ro + r)];
  }
  for (const ExactLinearKernel kernel : kKernels) {
    p.kernel = kernel;
    DSV4_CUDA_CHECK(cudaMemsetAsync(z.get(), 0xff, size_t(T * out_all) * 2, ctx.stream()));  // NaN: unwritten shows
    exact_linear(ctx, p);
    ctx.synchronize();
    const std::string what = std::string("exact_linear groups ") + kernel_name(kernel) + (fp8 ? " fp8" : " bf16") +
                             " G=" + std::to_string(G) + " ro=" + std::to_string(ro) + " gin=" + std::to_string(gin) +
                             " T=" + std::to_string(T);
    compare(what, from_bf16(z.download(what)), round_bf16(ref), Tol::Exact);
  }
}

TEST(CudaExactLinear, GroupModeMatchesCpuPerGroup) {
  DSV4_REQUIRE_HOPPER();
  for (const int64_t T : {1, 2, 3, 8, 20}) check_groups(4, 200, 512, T, false, 100 + uint64_t(T));
  check_groups(8, 1024, 4096, 1, false, 120);  // Flash's wo_a at one token
  check_groups(8, 1024, 4096, 32, false, 121);  // and at 32
  for (const int64_t T : {1, 5, 9}) check_groups(3, 136, 384, T, true, 130 + uint64_t(T));
}

}  // namespace
}  // namespace dsv4::cuda::test
