// Embedding gather and the hc_head collapse (contracts in embed_head.h).
#include <cstdint>

#include "backend/cuda/check.h"
#include "backend/cuda/cpu_math.cuh"
#include "backend/cuda/embed_head.h"
#include "backend/cuda/kernel_util.cuh"

namespace dsv4::cuda {
namespace {

constexpr int kHeadThreads = 256;
constexpr int kMaxStreams = 8;

// Block per token: 16-byte vectors of the row to all n streams.
__global__ void embed_kernel(EmbedParams p) {
  const int64_t t = blockIdx.x;
  int64_t id = p.ids[t];
  if (id < 0 || id >= p.vocab) {
    if (p.bad && threadIdx.x == 0) *p.bad = 1;
    id = 0;
  }
  const uint4* src = reinterpret_cast<const uint4*>(p.table + id * p.D);
  const int vecs = p.D / 8;
  for (int c = threadIdx.x; c < vecs; c += blockDim.x) {
    const uint4 v = src[c];
    for (int j = 0; j < p.n; ++j) reinterpret_cast<uint4*>(p.X + (t * p.n + j) * p.D)[c] = v;
  }
}

// The head's mHC coefficients in cpu::mhc_head_coeffs' arithmetic: the sum of squares and the n dot
// products in double (each product of an fp32 weight and a bf16 stream value is exact in double, so the
// summation order changes the double sum only far below the float rounding of the result), then
// rho, mix and the sigmoid in float with the twin's operations and no FMA contraction.
__global__ void hc_head_kernel(HcHeadParams p) {
  const int64_t t = blockIdx.x;
  const int64_t width = int64_t(p.n) * p.D;
  const bf16* X = p.X + t * width;
  double ss = 0.0, acc[kMaxStreams];
#pragma unroll
  for (int r = 0; r < kMaxStreams; ++r) acc[r] = 0.0;
  for (int64_t i = int64_t(threadIdx.x) * 8; i < width; i += int64_t(blockDim.x) * 8) {
    float x[8];
    load_bf16x8(X + i, x);
#pragma unroll
    for (int q = 0; q < 8; ++q) ss += double(x[q]) * x[q];
#pragma unroll
    for (int r = 0; r < kMaxStreams; ++r)
      if (r < p.n) {
        const float* f = p.fn + r * width + i;
#pragma unroll
        for (int q = 0; q < 8; ++q) acc[r] += double(f[q]) * x[q];
      }
  }
  __shared__ double red[kHeadThreads / 32][kMaxStreams + 1];
  __shared__ float pre[kMaxStreams];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  auto warp_sum_d = [](double v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
  };
  ss = warp_sum_d(ss);
  if (lane == 0) red[warp][kMaxStreams] = ss;
#pragma unroll
  for (int r = 0; r < kMaxStreams; ++r) {
    const double v = warp_sum_d(acc[r]);
    if (lane == 0) red[warp][r] = v;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    double s = 0.0, m[kMaxStreams];
    for (int r = 0; r < p.n; ++r) m[r] = 0.0;
    for (int w = 0; w < kHeadThreads / 32; ++w) {
      s += red[w][kMaxStreams];
      for (int r = 0; r < p.n; ++r) m[r] += red[w][r];
    }
    const float rho = 1.0f / sqrtf(__fadd_rn(float(s / double(width)), p.norm_eps));
    for (int r = 0; r < p.n; ++r) {
      const float z = __fadd_rn(__fmul_rn(p.scale[0], __fmul_rn(float(m[r]), rho)), p.base[r]);
      pre[r] = __fadd_rn(1.0f / (1.0f + cpu_expf(-z)), p.hc_eps);
    }
  }
  __syncthreads();
  for (int c = threadIdx.x * 2; c < p.D; c += blockDim.x * 2) {
    float u0 = 0.0f, u1 = 0.0f;
    for (int j = 0; j < p.n; ++j) {
      const float2 v = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(X + int64_t(j) * p.D + c));
      u0 = __fadd_rn(u0, __fmul_rn(pre[j], v.x));
      u1 = __fadd_rn(u1, __fmul_rn(pre[j], v.y));
    }
    *reinterpret_cast<__nv_bfloat162*>(p.u + t * p.D + c) = __floats2bfloat162_rn(u0, u1);
  }
}

}  // namespace

void embed_gather(const DeviceContext& ctx, const EmbedParams& p) {
  if (p.T == 0) return;
  if (!p.ids || !p.table || !p.X) fail("embed_gather: null pointer");
  if (p.D <= 0 || p.D % 8 != 0) fail("embed_gather: D ", p.D, " must be a positive multiple of 8");
  if (p.n <= 0 || p.vocab <= 0) fail("embed_gather: n and vocab must be positive");
  embed_kernel<<<unsigned(narrow_int(p.T, "embed tokens")), 256, 0, ctx.stream()>>>(p);
  DSV4_CUDA_CHECK_LAUNCH();
}

void hc_head_collapse(const DeviceContext& ctx, const HcHeadParams& p) {
  if (p.T == 0) return;
  if (!p.X || !p.fn || !p.base || !p.scale || !p.u) fail("hc_head_collapse: null pointer");
  if (p.n <= 0 || p.n > kMaxStreams) fail("hc_head_collapse: n = ", p.n, " (1..", kMaxStreams, ")");
  if (p.D <= 0 || p.D % 8 != 0) fail("hc_head_collapse: D ", p.D, " must be a positive multiple of 8");
  hc_head_kernel<<<unsigned(narrow_int(p.T, "hc_head tokens")), kHeadThreads, 0, ctx.stream()>>>(p);
  DSV4_CUDA_CHECK_LAUNCH();
}


}  // namespace dsv4::cuda
