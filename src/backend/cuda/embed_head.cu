// Embedding gather and the hc_head collapse (contracts in embed_head.h).
#include <cstdint>

#include "backend/cuda/check.h"
#include "backend/cuda/cpu_math.cuh"
#include "backend/cuda/embed_head.h"
#include "backend/cuda/kernel_util.cuh"

namespace dsv4::cuda {
namespace {

constexpr int kHeadThreads = 128;
constexpr int kMaxStreams = 8;
constexpr int kMaxHeadCluster = 16;

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
// A cluster of C blocks per token (C = hc_head_cluster(T): 16 for decode batches, fewer as T grows, so
// the grid stays near 512 blocks): rank r sums its slice (wchunk of the n*D inputs), stores the n + 1
// partials into every rank's shared memory, and after the cluster barrier each rank adds them in rank
// order, takes the coefficients and collapses its dchunk columns, u = bf16(sum_j pre_j X_j).
__global__ void __launch_bounds__(kHeadThreads) hc_head_kernel(HcHeadParams p, int wchunk, int dchunk) {
  namespace cg = cooperative_groups;
  cg::cluster_group cluster = cg::this_cluster();
  const int C = int(cluster.num_blocks()), rank = int(cluster.block_rank());
  const int64_t t = blockIdx.x / C;
  const int64_t width = int64_t(p.n) * p.D;
  const int64_t w0 = int64_t(rank) * wchunk, w1 = min(width, w0 + wchunk);
  __shared__ double red[kHeadThreads / 32][kMaxStreams + 1], gather[kMaxHeadCluster][kMaxStreams + 1];
  __shared__ float pre[kMaxStreams];
  allow_dependents();
  cluster_arrive_relaxed();  // this rank has started (the wait comes before the stores into the others)
  grid_dependency_wait();
  const bf16* X = p.X + t * width;
  double ss = 0.0, acc[kMaxStreams];
#pragma unroll
  for (int r = 0; r < kMaxStreams; ++r) acc[r] = 0.0;
  for (int64_t i = w0 + int64_t(threadIdx.x) * 8; i < w1; i += int64_t(kHeadThreads) * 8) {
    float x[8];
    load_bf16x8(X + i, x);
#pragma unroll
    for (int q = 0; q < 8; ++q) ss += double(x[q]) * x[q];
#pragma unroll
    for (int r = 0; r < kMaxStreams; ++r)
      if (r < p.n) acc[r] += dot8_f64(p.fn + r * width + i, x);
  }
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  ss = warp_sum(ss);
  if (lane == 0) red[warp][kMaxStreams] = ss;
#pragma unroll
  for (int r = 0; r < kMaxStreams; ++r) {
    const double v = warp_sum(acc[r]);
    if (lane == 0) red[warp][r] = v;
  }
  __syncthreads();
  cluster_wait();
  if (threadIdx.x <= kMaxStreams) {
    double v = 0.0;
#pragma unroll
    for (int w = 0; w < kHeadThreads / 32; ++w) v += red[w][threadIdx.x];
    store_in_every_rank(cluster, &gather[0][0], rank * (kMaxStreams + 1) + threadIdx.x, v);
  }
  cluster.sync();  // every rank's partials are in every rank's gather; no remote access after this
  if (threadIdx.x == 0) {
    double s = 0.0, m[kMaxStreams];
    for (int r = 0; r < p.n; ++r) m[r] = 0.0;
    for (int b = 0; b < C; ++b) {
      s += gather[b][kMaxStreams];
      for (int r = 0; r < p.n; ++r) m[r] += gather[b][r];
    }
    const float rho = 1.0f / sqrtf(__fadd_rn(float(s / double(width)), p.norm_eps));
    for (int r = 0; r < p.n; ++r) {
      const float z = __fadd_rn(__fmul_rn(p.scale[0], __fmul_rn(float(m[r]), rho)), p.base[r]);
      pre[r] = __fadd_rn(1.0f / (1.0f + exp_f32(-z)), p.hc_eps);
    }
  }
  __syncthreads();
  const int64_t c_end = min(int64_t(p.D), int64_t(rank + 1) * dchunk);
  for (int64_t c = int64_t(rank) * dchunk + threadIdx.x * 2; c < c_end; c += kHeadThreads * 2) {
    float u0 = 0.0f, u1 = 0.0f;
    for (int j = 0; j < p.n; ++j) {
      const float2 v = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(X + int64_t(j) * p.D + c));
      u0 = __fadd_rn(u0, __fmul_rn(pre[j], v.x));
      u1 = __fadd_rn(u1, __fmul_rn(pre[j], v.y));
    }
    *reinterpret_cast<__nv_bfloat162*>(p.u + t * p.D + c) = __floats2bfloat162_rn(u0, u1);
  }
}

// Blocks per token: 16 up to 32 tokens, then halving while T * C > 512 (8 up to 64, 4 up to 128, 2 up to
// 256, 1 from 257 tokens).
int hc_head_cluster(int64_t T) {
  int c = kMaxHeadCluster;
  while (c > 1 && T * c > 512) c /= 2;
  return c;
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
  const int C = hc_head_cluster(p.T);
  const int64_t width = int64_t(p.n) * p.D;
  const int wchunk = int(ceil_div(ceil_div(width, C), 8) * 8), dchunk = int(ceil_div(ceil_div(p.D, C), 2) * 2);
  launch_cluster_pdl(ctx, hc_head_kernel, dim3(unsigned(narrow_int(p.T * C, "hc_head blocks"))), dim3(kHeadThreads), C,
                     0, p, wchunk, dchunk);
  DSV4_CUDA_CHECK_LAUNCH();
}


}  // namespace dsv4::cuda
