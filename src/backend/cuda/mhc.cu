// mHC pre / post kernels (contracts in ops.h; MODEL.md §3).
#include <cstdint>

#include "backend/cuda/check.h"
#include "backend/cuda/cpu_math.cuh"
#include "backend/cuda/kernel_util.cuh"
#include "backend/cuda/ops.h"

namespace dsv4::cuda {
namespace {

constexpr int kN = 4;                   // streams (hc_mult); the kernels are written for 4
constexpr int kRows = (2 + kN) * kN;    // 24 mixes: pre 4, post 4, comb 16
constexpr int kThreads = 256;
constexpr int kChunk = kThreads * 8;    // inputs per block: 8 bf16 (one 16-byte vector) per thread

__device__ __forceinline__ float sigmoid_dev(float z) { return 1.0f / (1.0f + cpu_expf(-z)); }
// scale * mix + base without FMA contraction, as the CPU twin computes it.
__device__ __forceinline__ float affine(float s, float m, float b) { return __fadd_rn(__fmul_rn(s, m), b); }

__device__ __forceinline__ void load8(const bf16* p, float (&v)[8]) {
  uint4 raw = *reinterpret_cast<const uint4*>(p);
  const __nv_bfloat162* h = reinterpret_cast<const __nv_bfloat162*>(&raw);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    float2 f = __bfloat1622float2(h[i]);
    v[2 * i] = f.x;
    v[2 * i + 1] = f.y;
  }
}

// Pass 1: block (token, slice) reduces sum(x^2) and the 24 dot products fn[r] . x over its slice of
// the n*D stream values. Writes partial[token][slice][0..23] = dots, [24] = sum of squares.
__global__ void mhc_mix_partial_kernel(MhcPreParams p, int slices) {
  const int64_t token = blockIdx.x / slices;
  const int slice = blockIdx.x % slices;
  const int64_t width = int64_t(kN) * p.D;
  const int64_t i0 = int64_t(slice) * kChunk + threadIdx.x * 8;

  // Double sums, as cpu::hc_mixes (products of fp32 weights and bf16 streams are exact in double).
  double acc[kRows + 1];
#pragma unroll
  for (int r = 0; r <= kRows; ++r) acc[r] = 0.0;
  if (i0 < width) {
    float x[8];
    load8(p.X + token * width + i0, x);
#pragma unroll
    for (int i = 0; i < 8; ++i) acc[kRows] += double(x[i]) * x[i];
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      const float4* f = reinterpret_cast<const float4*>(p.fn + r * width + i0);
      float4 a = f[0], b = f[1];
      acc[r] = double(a.x) * x[0] + double(a.y) * x[1] + double(a.z) * x[2] + double(a.w) * x[3] +
               double(b.x) * x[4] + double(b.y) * x[5] + double(b.z) * x[6] + double(b.w) * x[7];
    }
  }
  __shared__ double part[kThreads / 32][kRows + 1];
#pragma unroll
  for (int r = 0; r <= kRows; ++r) {
    double v = acc[r];
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    if ((threadIdx.x & 31) == 0) part[threadIdx.x >> 5][r] = v;
  }
  __syncthreads();
  if (threadIdx.x <= kRows) {
    double t = 0.0;
    for (int w = 0; w < kThreads / 32; ++w) t += part[w][threadIdx.x];
    reinterpret_cast<double*>(p.partial)[(token * slices + slice) * (kRows + 1) + threadIdx.x] = t;
  }
}

// The coefficients of one token from its partials, mirroring cpu::mhc_coeffs step by step.
__device__ void mhc_coefficients(const MhcPreParams& p, const double* partial, int slices, float* pre,
                                 float* post, float* C) {
  double dmix[kRows];
  double ss = 0.0;
  for (int r = 0; r < kRows; ++r) dmix[r] = 0.0;
  for (int s = 0; s < slices; ++s) {  // fixed order: deterministic across runs
    for (int r = 0; r < kRows; ++r) dmix[r] += partial[s * (kRows + 1) + r];
    ss += partial[s * (kRows + 1) + kRows];
  }
  const float rho = 1.0f / sqrtf(__fadd_rn(float(ss / double(kN * p.D)), p.norm_eps));
  float mix[kRows];
  for (int r = 0; r < kRows; ++r) mix[r] = __fmul_rn(float(dmix[r]), rho);
  for (int j = 0; j < kN; ++j) {
    pre[j] = sigmoid_dev(affine(p.scale[0], mix[j], p.base[j])) + p.hc_eps;
    post[j] = 2.0f * sigmoid_dev(affine(p.scale[1], mix[kN + j], p.base[kN + j]));
  }
  // Sinkhorn: row softmax + eps, column normalize, then (iters - 1) x (row, column) normalizations.
  for (int j = 0; j < kN; ++j) {
    float mx = -INFINITY;
    for (int k = 0; k < kN; ++k) {
      C[j * kN + k] = affine(p.scale[2], mix[2 * kN + j * kN + k], p.base[2 * kN + j * kN + k]);
      mx = fmaxf(mx, C[j * kN + k]);
    }
    float sum = 0.0f;
    for (int k = 0; k < kN; ++k) sum += (C[j * kN + k] = cpu_expf(C[j * kN + k] - mx));
    for (int k = 0; k < kN; ++k) C[j * kN + k] = C[j * kN + k] / sum + p.hc_eps;
  }
  auto col_norm = [&] {
    for (int k = 0; k < kN; ++k) {
      float s = 0.0f;
      for (int j = 0; j < kN; ++j) s += C[j * kN + k];
      for (int j = 0; j < kN; ++j) C[j * kN + k] /= (s + p.hc_eps);
    }
  };
  auto row_norm = [&] {
    for (int j = 0; j < kN; ++j) {
      float s = 0.0f;
      for (int k = 0; k < kN; ++k) s += C[j * kN + k];
      for (int k = 0; k < kN; ++k) C[j * kN + k] /= (s + p.hc_eps);
    }
  };
  col_norm();
  for (int it = 1; it < p.sinkhorn_iters; ++it) {
    row_norm();
    col_norm();
  }
}

// Pass 2: block (token, column slice). Thread 0 finishes the coefficients (a few hundred flops, not
// worth a launch of its own); the block then collapses its columns u[c] = sum_j pre_j X_j[c].
__global__ void mhc_finish_collapse_kernel(MhcPreParams p, int slices, int col_slices) {
  const int64_t token = blockIdx.x / col_slices;
  const int cs = blockIdx.x % col_slices;
  __shared__ float pre_s[kN];
  if (threadIdx.x == 0) {
    float pre[kN], post[kN], C[kN * kN];
    mhc_coefficients(p, reinterpret_cast<const double*>(p.partial) + token * slices * (kRows + 1), slices, pre, post, C);
    for (int j = 0; j < kN; ++j) pre_s[j] = pre[j];
    if (cs == 0) {
      for (int j = 0; j < kN; ++j) {
        p.pre[token * kN + j] = pre[j];
        p.post[token * kN + j] = post[j];
      }
      for (int i = 0; i < kN * kN; ++i) p.comb[token * kN * kN + i] = C[i];
    }
  }
  __syncthreads();
  const int c0 = cs * kChunk + threadIdx.x * 8;
  if (c0 >= p.D) return;
  const bf16* X = p.X + token * kN * p.D;
  float u[8] = {0, 0, 0, 0, 0, 0, 0, 0};
#pragma unroll
  for (int j = 0; j < kN; ++j) {
    float x[8];
    load8(X + int64_t(j) * p.D + c0, x);
#pragma unroll
    for (int i = 0; i < 8; ++i) u[i] = __fadd_rn(u[i], __fmul_rn(pre_s[j], x[i]));
  }
  uint4 out;
  __nv_bfloat162* o = reinterpret_cast<__nv_bfloat162*>(&out);
#pragma unroll
  for (int i = 0; i < 4; ++i) o[i] = __floats2bfloat162_rn(u[2 * i], u[2 * i + 1]);
  *reinterpret_cast<uint4*>(p.u + token * p.D + c0) = out;
}

__global__ void mhc_post_kernel(MhcPostParams p, int col_slices) {
  const int64_t token = blockIdx.x / col_slices;
  const int c0 = (blockIdx.x % col_slices) * kChunk + threadIdx.x * 8;
  if (c0 >= p.D) return;
  float post[kN], comb[kN * kN];
#pragma unroll
  for (int j = 0; j < kN; ++j) post[j] = p.post[token * kN + j];
#pragma unroll
  for (int i = 0; i < kN * kN; ++i) comb[i] = p.comb[token * kN * kN + i];
  float y[8], x[kN][8];
  load8(p.y + token * p.D + c0, y);
#pragma unroll
  for (int j = 0; j < kN; ++j) load8(p.X + (token * kN + j) * p.D + c0, x[j]);
#pragma unroll
  for (int k = 0; k < kN; ++k) {
    float o[8];
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      float s = __fmul_rn(post[k], y[i]);
#pragma unroll
      for (int j = 0; j < kN; ++j) s = __fadd_rn(s, __fmul_rn(comb[j * kN + k], x[j][i]));
      o[i] = s;
    }
    uint4 out;
    __nv_bfloat162* h = reinterpret_cast<__nv_bfloat162*>(&out);
#pragma unroll
    for (int i = 0; i < 4; ++i) h[i] = __floats2bfloat162_rn(o[2 * i], o[2 * i + 1]);
    *reinterpret_cast<uint4*>(p.out + (token * kN + k) * p.D + c0) = out;
  }
}

int mix_slices(int n, int D) { return int(ceil_div(int64_t(n) * D, kChunk)); }

}  // namespace

size_t mhc_pre_partial_floats(int64_t tokens, int n, int D) {
  return 2 * size_t(tokens) * size_t(mix_slices(n, D)) * size_t((2 + n) * n + 1);  // doubles
}

void mhc_pre(const DeviceContext& ctx, const MhcPreParams& p) {
  if (p.tokens == 0) return;
  if (p.n != kN) fail("mhc_pre: ", p.n, " streams; the CUDA kernels support hc_mult = 4");
  if (p.D <= 0 || p.D % 8 != 0) fail("mhc_pre: D ", p.D, " must be a positive multiple of 8");
  if (!p.X || !p.fn || !p.base || !p.scale || !p.pre || !p.post || !p.comb || !p.u || !p.partial)
    fail("mhc_pre: null pointer");
  if (p.sinkhorn_iters < 1) fail("mhc_pre: sinkhorn_iters must be >= 1");
  const int slices = mix_slices(kN, p.D);
  const int col_slices = int(ceil_div(p.D, kChunk));
  mhc_mix_partial_kernel<<<narrow_int(p.tokens * slices, "mhc_pre grid"), kThreads, 0, ctx.stream()>>>(p, slices);
  DSV4_CUDA_CHECK_LAUNCH();
  mhc_finish_collapse_kernel<<<narrow_int(p.tokens * col_slices, "mhc_pre grid"), kThreads, 0, ctx.stream()>>>(
      p, slices, col_slices);
  DSV4_CUDA_CHECK_LAUNCH();
}

void mhc_post(const DeviceContext& ctx, const MhcPostParams& p) {
  if (p.tokens == 0) return;
  if (p.n != kN) fail("mhc_post: ", p.n, " streams; the CUDA kernels support hc_mult = 4");
  if (p.D <= 0 || p.D % 8 != 0) fail("mhc_post: D ", p.D, " must be a positive multiple of 8");
  if (!p.X || !p.y || !p.post || !p.comb || !p.out) fail("mhc_post: null pointer");
  const int col_slices = int(ceil_div(p.D, kChunk));
  mhc_post_kernel<<<narrow_int(p.tokens * col_slices, "mhc_post grid"), kThreads, 0, ctx.stream()>>>(p, col_slices);
  DSV4_CUDA_CHECK_LAUNCH();
}

}  // namespace dsv4::cuda
