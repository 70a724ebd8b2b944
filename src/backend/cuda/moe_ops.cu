// MoE selection gather, permutation plan, SwiGLU and combine kernels (contracts in moe_ops.h).
#include <cstdint>

#include "backend/cuda/check.h"
#include "backend/cuda/cpu_math.cuh"
#include "backend/cuda/kernel_util.cuh"
#include "backend/cuda/moe_ops.h"
#include "backend/cuda/swiglu.cuh"

namespace dsv4::cuda {
namespace {

constexpr int kPlanChunk = 1024;  // entries per block of the plan (= threads)
constexpr int kMaxPlanExperts = 4096;
constexpr int kMaxPicks = 16;

// Block i copies token i / k's codes (16-byte vectors) and scales.
__global__ void moe_gather_kernel(MoeGatherParams p) {
  const int64_t i = blockIdx.x;
  const int64_t t = (p.rows ? p.rows[i] : i) / p.k;
  const uint4* src = reinterpret_cast<const uint4*>(p.xq + t * p.D);
  uint4* dst = reinterpret_cast<uint4*>(p.sel_xq + i * p.D);
  for (int c = threadIdx.x; c < p.D / 16; c += blockDim.x) dst[c] = src[c];
  const int blocks = p.D / 128;
  for (int b = threadIdx.x; b < blocks; b += blockDim.x) p.sel_xs[i * blocks + b] = p.xs[int64_t(b) * p.P + t];
}

// Block i copies row rows[i] / div (16-byte vectors).
__global__ void gather_rows_kernel(GatherRowsParams p) {
  const int64_t i = blockIdx.x;
  const int64_t r = p.rows[i] / p.div;
  const uint4* src = reinterpret_cast<const uint4*>(p.src + r * p.D);
  uint4* dst = reinterpret_cast<uint4*>(p.dst + i * p.D);
  for (int c = threadIdx.x; c < p.D / 8; c += blockDim.x) dst[c] = src[c];
}

// Plan step 1, block per chunk of kPlanChunk entries: the warps take turns in entry order; each gives
// its lanes their rank among the chunk's earlier entries of the same expert (a shared histogram
// advanced warp by warp, peers found by __match_any_sync), then the block stores its histogram.
__global__ void moe_plan_rank_kernel(MoePlanParams p) {
  extern __shared__ int hist[];  // [E]
  for (int e = threadIdx.x; e < p.E; e += blockDim.x) hist[e] = 0;
  __syncthreads();
  const int64_t i = int64_t(blockIdx.x) * kPlanChunk + threadIdx.x;
  const bool live = i < p.entries;
  const int id = live ? p.ids[i] : -1;
  const unsigned lane = threadIdx.x & 31u, warp = threadIdx.x >> 5;
  const unsigned peers = __match_any_sync(0xffffffffu, id);
  const int rank_in_warp = __popc(peers & ((1u << lane) - 1u));
  const bool leader = rank_in_warp == 0;
  int32_t* ranks = p.scratch;
  for (unsigned w = 0; w < blockDim.x / 32; ++w) {
    if (w == warp && live) {
      const int base = hist[id];
      __syncwarp(peers);
      if (leader) hist[id] = base + __popc(peers);
      ranks[i] = base + rank_in_warp;
    }
    __syncthreads();
  }
  int32_t* chunk_counts = p.scratch + p.entries + int64_t(blockIdx.x) * p.E;
  for (int e = threadIdx.x; e < p.E; e += blockDim.x) chunk_counts[e] = hist[e];
}

// Plan step 2, one block of kPlanChunk threads: per expert, the exclusive prefix of the chunk counts
// (in place) and the total; then the exclusive scan of the totals over the experts.
__global__ void moe_plan_scan_kernel(MoePlanParams p, int chunks) {
  __shared__ int total[kMaxPlanExperts];
  __shared__ int warp_sums[kPlanChunk / 32];
  int32_t* cc = p.scratch + p.entries;
  for (int e = threadIdx.x; e < p.E; e += blockDim.x) {
    int run = 0;
    for (int c = 0; c < chunks; ++c) {
      const int v = cc[int64_t(c) * p.E + e];
      cc[int64_t(c) * p.E + e] = run;
      run += v;
    }
    total[e] = run;
    p.counts[e] = run;
  }
  __syncthreads();
  constexpr int kPer = kMaxPlanExperts / kPlanChunk;  // experts per thread, consecutive
  int v[kPer], sum = 0;
  for (int q = 0; q < kPer; ++q) {
    const int e = threadIdx.x * kPer + q;
    v[q] = e < p.E ? total[e] : 0;
    sum += v[q];
  }
  const unsigned lane = threadIdx.x & 31u, warp = threadIdx.x >> 5;
  int incl = sum;  // inclusive scan of the per-thread sums: warp, then across warps
  for (int d = 1; d < 32; d <<= 1) {
    const int o = __shfl_up_sync(0xffffffffu, incl, d);
    if (lane >= unsigned(d)) incl += o;
  }
  if (lane == 31) warp_sums[warp] = incl;
  __syncthreads();
  if (warp == 0) {
    int ws = lane < kPlanChunk / 32 ? warp_sums[lane] : 0;
    for (int d = 1; d < 32; d <<= 1) {
      const int o = __shfl_up_sync(0xffffffffu, ws, d);
      if (lane >= unsigned(d)) ws += o;
    }
    if (lane < kPlanChunk / 32) warp_sums[lane] = ws;
  }
  __syncthreads();
  int run = incl - sum + (warp > 0 ? warp_sums[warp - 1] : 0);
  for (int q = 0; q < kPer; ++q) {
    const int e = threadIdx.x * kPer + q;
    if (e < p.E) p.offsets[e] = run;
    run += v[q];
    if (e == p.E - 1) p.offsets[p.E] = run;
  }
}

// Plan step 3: entry i of chunk c, expert e, goes to offsets[e] + prefix[c, e] + rank[i].
__global__ void moe_plan_scatter_kernel(MoePlanParams p) {
  const int64_t i = int64_t(blockIdx.x) * kPlanChunk + threadIdx.x;
  if (i >= p.entries) return;
  const int e = p.ids[i];
  const int r = p.offsets[e] + p.scratch[p.entries + int64_t(blockIdx.x) * p.E + e] + p.scratch[i];
  p.rows[r] = int32_t(i);
  if (p.entry_row) p.entry_row[i] = r;
}

__global__ void swiglu_kernel(SwigluParams p, int64_t pairs) {
  const int64_t q = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (q >= pairs) return;
  const int64_t row = q / (p.I / 2);
  const int c = int(q % (p.I / 2)) * 2;
  const float2 g = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(p.g + row * p.g_stride + c));
  const float2 u = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(p.u + row * p.u_stride + c));
  const float w = p.weight ? p.weight[row] : 1.0f;
  *reinterpret_cast<__nv_bfloat162*>(p.h + row * p.I + c) =
      __floats2bfloat162_rn(swiglu_value(g.x, u.x, w, p.limit), swiglu_value(g.y, u.y, w, p.limit));
}

// Thread per (token, V columns): sums the picks in ascending expert order, then the shared expert. V = 8
// (16-byte rows pieces; the picks' order is found once per 8 columns) where D allows, else 2.
template <int V>
__device__ __forceinline__ void load_bf16s(const bf16* at, float (&v)[V]) {
  if constexpr (V == 8) {
    bf16x8_values(*reinterpret_cast<const uint4*>(at), v);
  } else {
    const float2 f = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(at));
    v[0] = f.x;
    v[1] = f.y;
  }
}

template <int V>
__global__ void moe_combine_kernel(MoeCombineParams p, int64_t pieces) {
  const int64_t q = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (q >= pieces) return;
  const int64_t t = q / (p.D / V);
  const int c = int(q % (p.D / V)) * V;
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
  auto row_of = [&](int64_t entry) { return p.entry_row ? int64_t(p.entry_row[entry]) : entry; };
  float s[V] = {};
  for (int j = 0; j < p.k; ++j) {
    float v[V];
    load_bf16s<V>(p.y2 + row_of(t * p.k + order[j]) * p.D + c, v);
#pragma unroll
    for (int i = 0; i < V; ++i) s[i] = __fadd_rn(s[i], v[i]);
  }
  if (p.shared) {
    float v[V];
    load_bf16s<V>(p.shared + t * p.D + c, v);
#pragma unroll
    for (int i = 0; i < V; ++i) s[i] = __fadd_rn(s[i], v[i]);
  }
  __nv_bfloat162 out[V / 2];
#pragma unroll
  for (int i = 0; i < V / 2; ++i) out[i] = __floats2bfloat162_rn(s[2 * i], s[2 * i + 1]);
  if constexpr (V == 8)
    *reinterpret_cast<uint4*>(p.y + t * p.D + c) = *reinterpret_cast<const uint4*>(out);
  else
    *reinterpret_cast<__nv_bfloat162*>(p.y + t * p.D + c) = out[0];
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

void gather_rows(const DeviceContext& ctx, const GatherRowsParams& p) {
  if (p.n == 0) return;
  if (!p.src || !p.rows || !p.dst) fail("gather_rows: null pointer");
  if (p.D <= 0 || p.D % 8 != 0 || p.div < 1) fail("gather_rows: D ", p.D, " must be a positive multiple of 8, div ", p.div, " positive");
  if ((reinterpret_cast<uintptr_t>(p.src) | reinterpret_cast<uintptr_t>(p.dst)) & 15u)
    fail("gather_rows: rows must be 16-byte aligned");
  gather_rows_kernel<<<unsigned(narrow_int(p.n, "gather_rows rows")), 128, 0, ctx.stream()>>>(p);
  DSV4_CUDA_CHECK_LAUNCH();
}

void moe_plan(const DeviceContext& ctx, const MoePlanParams& p) {
  if (!p.ids && p.entries > 0) fail("moe_plan: null ids");
  if (!p.counts || !p.offsets || !p.rows || !p.scratch) fail("moe_plan: null pointer");
  if (p.E <= 0 || p.E > kMaxPlanExperts) fail("moe_plan: ", p.E, " experts (1..", kMaxPlanExperts, ")");
  narrow_int(p.entries + moe_plan_scratch_ints(p.entries, p.E), "moe_plan entries");
  const int chunks = int(ceil_div(p.entries, kPlanChunk));
  if (chunks > 0) {
    moe_plan_rank_kernel<<<unsigned(chunks), kPlanChunk, size_t(p.E) * sizeof(int), ctx.stream()>>>(p);
    DSV4_CUDA_CHECK_LAUNCH();
  }
  moe_plan_scan_kernel<<<1, kPlanChunk, 0, ctx.stream()>>>(p, chunks);
  DSV4_CUDA_CHECK_LAUNCH();
  if (chunks > 0) {
    moe_plan_scatter_kernel<<<unsigned(chunks), kPlanChunk, 0, ctx.stream()>>>(p);
    DSV4_CUDA_CHECK_LAUNCH();
  }
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
  const bool wide = p.D % 8 == 0 && aligned16(p.y2) && aligned16(p.y) && (!p.shared || aligned16(p.shared));
  const int64_t pieces = p.T * (p.D / (wide ? 8 : 2));
  if (wide)
    moe_combine_kernel<8><<<grid_for(pieces, 256, "moe_combine blocks"), 256, 0, ctx.stream()>>>(p, pieces);
  else
    moe_combine_kernel<2><<<grid_for(pieces, 256, "moe_combine blocks"), 256, 0, ctx.stream()>>>(p, pieces);
  DSV4_CUDA_CHECK_LAUNCH();
}

}  // namespace dsv4::cuda
