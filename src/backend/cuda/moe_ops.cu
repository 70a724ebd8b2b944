// MoE selection gather, permutation plan, SwiGLU and combine kernels (contracts in moe_ops.h).
#include <cstdint>

#include "backend/cuda/check.h"
#include "backend/cuda/cpu_math.cuh"
#include "backend/cuda/kernel_util.cuh"
#include "backend/cuda/moe_ops.h"

namespace dsv4::cuda {
namespace {

constexpr int kPlanThreads = 1024;
constexpr int kMaxPlanExperts = 4096;
constexpr int kMaxPicks = 16;

// Block i copies token i / k's codes (16-byte vectors) and scales.
__global__ void moe_gather_kernel(MoeGatherParams p) {
  const int64_t i = blockIdx.x;
  const int64_t t = i / p.k;
  const uint4* src = reinterpret_cast<const uint4*>(p.xq + t * p.D);
  uint4* dst = reinterpret_cast<uint4*>(p.sel_xq + i * p.D);
  for (int c = threadIdx.x; c < p.D / 16; c += blockDim.x) dst[c] = src[c];
  const int blocks = p.D / 128;
  for (int b = threadIdx.x; b < blocks; b += blockDim.x) p.sel_xs[i * blocks + b] = p.xs[int64_t(b) * p.P + t];
}

// One block: thread e counts / places the entries of experts e, e + blockDim, ... in entry order.
__global__ void moe_plan_kernel(MoePlanParams p) {
  __shared__ int off[kMaxPlanExperts + 1];
  for (int e = threadIdx.x; e < p.E; e += blockDim.x) {
    int c = 0;
    for (int64_t i = 0; i < p.entries; ++i) c += p.ids[i] == e;
    off[e + 1] = c;
    p.counts[e] = c;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    off[0] = 0;
    for (int e = 0; e < p.E; ++e) off[e + 1] += off[e];
  }
  __syncthreads();
  for (int e = threadIdx.x; e <= p.E; e += blockDim.x) p.offsets[e] = off[e];
  for (int e = threadIdx.x; e < p.E; e += blockDim.x) {
    int o = off[e];
    for (int64_t i = 0; i < p.entries; ++i)
      if (p.ids[i] == e) p.rows[o++] = int32_t(i);
  }
}

__global__ void swiglu_kernel(SwigluParams p, int64_t pairs) {
  const int64_t q = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (q >= pairs) return;
  const int64_t row = q / (p.I / 2);
  const int c = int(q % (p.I / 2)) * 2;
  const float2 g = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(p.g + row * p.g_stride + c));
  const float2 u = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(p.u + row * p.u_stride + c));
  const float w = p.weight ? p.weight[row] : 1.0f;
  float gv[2] = {g.x, g.y}, uv[2] = {u.x, u.y}, h[2];
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    float a = gv[i], b = uv[i];
    if (p.limit > 0) {
      a = fminf(a, p.limit);
      b = fminf(fmaxf(b, -p.limit), p.limit);
    }
    const float silu = __fdiv_rn(a, __fadd_rn(1.0f, cpu_expf(-a)));
    h[i] = __fmul_rn(w, __fmul_rn(silu, b));
  }
  *reinterpret_cast<__nv_bfloat162*>(p.h + row * p.I + c) = __floats2bfloat162_rn(h[0], h[1]);
}

// Thread per (token, column pair): sums the picks in ascending expert order, then the shared expert.
__global__ void moe_combine_kernel(MoeCombineParams p, int64_t pairs) {
  const int64_t q = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (q >= pairs) return;
  const int64_t t = q / (p.D / 2);
  const int c = int(q % (p.D / 2)) * 2;
  int order[kMaxPicks];
  int ids[kMaxPicks];
  for (int j = 0; j < p.k; ++j) {
    ids[j] = p.ids[t * p.k + j];
    order[j] = j;
  }
  for (int a = 1; a < p.k; ++a) {  // insertion sort: stable, k <= 16
    const int v = order[a];
    int b = a - 1;
    while (b >= 0 && ids[order[b]] > ids[v]) {
      order[b + 1] = order[b];
      --b;
    }
    order[b + 1] = v;
  }
  float s0 = 0.0f, s1 = 0.0f;
  for (int j = 0; j < p.k; ++j) {
    const float2 v = __bfloat1622float2(
        *reinterpret_cast<const __nv_bfloat162*>(p.y2 + (t * p.k + order[j]) * p.D + c));
    s0 = __fadd_rn(s0, v.x);
    s1 = __fadd_rn(s1, v.y);
  }
  if (p.shared) {
    const float2 v = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(p.shared + t * p.D + c));
    s0 = __fadd_rn(s0, v.x);
    s1 = __fadd_rn(s1, v.y);
  }
  *reinterpret_cast<__nv_bfloat162*>(p.y + t * p.D + c) = __floats2bfloat162_rn(s0, s1);
}

unsigned grid_for(int64_t threads, int block, const char* what) {
  return unsigned(narrow_int(ceil_div(threads, block), what));
}

}  // namespace

void moe_gather(const DeviceContext& ctx, const MoeGatherParams& p) {
  if (p.T == 0) return;
  if (!p.xq || !p.xs || !p.sel_xq || !p.sel_xs) fail("moe_gather: null pointer");
  if (p.D <= 0 || p.D % 128 != 0) fail("moe_gather: D ", p.D, " must be a positive multiple of 128");
  if (p.k <= 0 || p.P < p.T) fail("moe_gather: k ", p.k, ", P ", p.P, " < T ", p.T);
  if ((reinterpret_cast<uintptr_t>(p.xq) | reinterpret_cast<uintptr_t>(p.sel_xq)) & 15u)
    fail("moe_gather: code rows must be 16-byte aligned");
  moe_gather_kernel<<<unsigned(narrow_int(p.T * p.k, "moe_gather rows")), 128, 0, ctx.stream()>>>(p);
  DSV4_CUDA_CHECK_LAUNCH();
}

void moe_plan(const DeviceContext& ctx, const MoePlanParams& p) {
  if (!p.ids && p.entries > 0) fail("moe_plan: null ids");
  if (!p.counts || !p.offsets || !p.rows) fail("moe_plan: null pointer");
  if (p.E <= 0 || p.E > kMaxPlanExperts) fail("moe_plan: ", p.E, " experts (1..", kMaxPlanExperts, ")");
  narrow_int(p.entries, "moe_plan entries");
  moe_plan_kernel<<<1, kPlanThreads, 0, ctx.stream()>>>(p);
  DSV4_CUDA_CHECK_LAUNCH();
}

void swiglu(const DeviceContext& ctx, const SwigluParams& p) {
  if (p.rows == 0) return;
  if (!p.g || !p.u || !p.h) fail("swiglu: null pointer");
  if (p.I <= 0 || p.I % 2 != 0 || p.g_stride % 2 != 0 || p.u_stride % 2 != 0)
    fail("swiglu: I and the strides must be even (bf16 pairs)");
  const int64_t pairs = p.rows * (p.I / 2);
  swiglu_kernel<<<grid_for(pairs, 256, "swiglu blocks"), 256, 0, ctx.stream()>>>(p, pairs);
  DSV4_CUDA_CHECK_LAUNCH();
}

void moe_combine(const DeviceContext& ctx, const MoeCombineParams& p) {
  if (p.T == 0) return;
  if (!p.y2 || !p.ids || !p.y) fail("moe_combine: null pointer");
  if (p.k <= 0 || p.k > kMaxPicks) fail("moe_combine: k = ", p.k, " (1..", kMaxPicks, ")");
  if (p.D <= 0 || p.D % 2 != 0) fail("moe_combine: D must be even");
  const int64_t pairs = p.T * (p.D / 2);
  moe_combine_kernel<<<grid_for(pairs, 256, "moe_combine blocks"), 256, 0, ctx.stream()>>>(p, pairs);
  DSV4_CUDA_CHECK_LAUNCH();
}

}  // namespace dsv4::cuda
