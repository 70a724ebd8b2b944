// Lightning indexer kernels (contracts in attn_ops.h; CPU twin: index_topk in src/model/indexer.cpp).
#include <cmath>

#include "backend/cuda/attn_ops.h"
#include "backend/cuda/check.h"
#include "backend/cuda/kernel_util.cuh"
#include "backend/cuda/quant_sim.cuh"

namespace dsv4::cuda {
namespace {

__device__ __forceinline__ int64_t imin64(int64_t a, int64_t b) { return a < b ? a : b; }

constexpr int kScoreWarps = 8;
constexpr int kTopkThreads = 1024;
constexpr int64_t kTopkMaxEntries = 16384;  // 128 KiB of 64-bit sort keys in shared memory

// Grid (tokens, entry groups); q of the token and its scaled head weights in shared memory; one warp
// per entry, the heads summed in order as the twin does.
__global__ void __launch_bounds__(kScoreWarps * 32) indexer_scores_kernel(IndexerScoreParams p) {
  extern __shared__ float sq[];  // [heads * dim] q, then [heads] bf16(w * wscale)
  float* sw = sq + p.heads * p.dim;
  const int64_t t = blockIdx.x;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  for (int i = tid; i < p.heads * p.dim; i += blockDim.x) sq[i] = __bfloat162float(p.q[t * p.heads * p.dim + i]);
  for (int h = tid; h < p.heads; h += blockDim.x)
    sw[h] = qsim::bf16r(__fmul_rn(__bfloat162float(p.w[t * p.heads + h]), p.wscale));
  __syncthreads();
  const int64_t nvis = (int64_t(p.positions[t]) + 1) / p.ratio;
  const int64_t s = int64_t(blockIdx.y) * kScoreWarps + warp;
  if (s >= p.max_entries) return;
  if (s >= nvis) {
    if (lane == 0) p.scores[t * p.max_entries + s] = -INFINITY;
    return;
  }
  const bf16* k = p.keys + (int64_t(p.slots[t]) * p.max_entries + s) * p.dim;
  float total = 0.0f;
  for (int h = 0; h < p.heads; ++h) {
    float dot = 0.0f;
    for (int i = lane; i < p.dim; i += 32) dot = fmaf(sq[h * p.dim + i], __bfloat162float(k[i]), dot);
    dot = warp_sum(dot);
    const float term = qsim::bf16r(__fmul_rn(qsim::bf16r(fmaxf(dot, 0.0f)), sw[h]));
    total = __fadd_rn(total, term);
  }
  if (lane == 0) p.scores[t * p.max_entries + s] = qsim::bf16r(total);
}

// Sort key: ascending order = descending score, then ascending index; invisible entries last.
__device__ __forceinline__ uint64_t topk_key(float score, uint32_t idx) {
  uint32_t u = __float_as_uint(score);
  u = (u & 0x80000000u) ? ~u : (u | 0x80000000u);  // ascending with the score
  return (uint64_t(~u) << 32) | idx;
}

__global__ void __launch_bounds__(kTopkThreads) indexer_topk_kernel(IndexerTopkParams p, int cap) {
  extern __shared__ uint64_t keys[];  // [cap]
  const int64_t t = blockIdx.x;
  const int64_t nvis = imin64((int64_t(p.positions[t]) + 1) / p.ratio, p.max_entries);
  for (int i = threadIdx.x; i < cap; i += blockDim.x)
    keys[i] = i < nvis ? topk_key(p.scores[t * p.max_entries + i], uint32_t(i)) : ~uint64_t(0);
  // Bitonic sort, ascending.
  for (int size = 2; size <= cap; size <<= 1)
    for (int stride = size >> 1; stride > 0; stride >>= 1) {
      __syncthreads();
      for (int i = threadIdx.x; i < cap; i += blockDim.x) {
        const int j = i ^ stride;
        if (j > i) {
          const bool up = (i & size) == 0;
          const uint64_t a = keys[i], b = keys[j];
          if ((a > b) == up) {
            keys[i] = b;
            keys[j] = a;
          }
        }
      }
    }
  __syncthreads();
  for (int i = threadIdx.x; i < p.k; i += blockDim.x)
    p.selected[t * p.k + i] = (i < nvis && i < cap) ? int32_t(uint32_t(keys[i])) : -1;
}

}  // namespace

void indexer_scores(const DeviceContext& ctx, const IndexerScoreParams& p) {
  if (p.tokens == 0 || p.max_entries == 0) return;
  if (!p.q || !p.w || !p.keys || !p.scores || !p.positions || !p.slots) fail("indexer_scores: null pointer");
  if (p.ratio <= 0 || p.heads <= 0 || p.dim <= 0) fail("indexer_scores: bad shape");
  const size_t smem = size_t(p.heads * p.dim + p.heads) * sizeof(float);
  if (smem > 48 * 1024)
    DSV4_CUDA_CHECK(cudaFuncSetAttribute(indexer_scores_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
  const dim3 grid(narrow_int(p.tokens, "indexer_scores tokens"),
                  narrow_int(ceil_div(p.max_entries, kScoreWarps), "indexer_scores entry groups"));
  indexer_scores_kernel<<<grid, kScoreWarps * 32, smem, ctx.stream()>>>(p);
  DSV4_CUDA_CHECK_LAUNCH();
}

void indexer_topk(const DeviceContext& ctx, const IndexerTopkParams& p) {
  if (p.tokens == 0) return;
  if (!p.scores || !p.selected || !p.positions) fail("indexer_topk: null pointer");
  if (p.k <= 0 || p.ratio <= 0) fail("indexer_topk: k and ratio must be positive");
  if (p.max_entries > kTopkMaxEntries)
    fail("indexer_topk: ", p.max_entries, " entries per sequence exceed the shared-memory sort (", kTopkMaxEntries,
         "); a multi-pass top-k is still to be written");
  int cap = 2;
  while (cap < p.max_entries) cap <<= 1;
  const size_t smem = size_t(cap) * sizeof(uint64_t);
  if (smem > 48 * 1024)
    DSV4_CUDA_CHECK(cudaFuncSetAttribute(indexer_topk_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
  indexer_topk_kernel<<<narrow_int(p.tokens, "indexer_topk grid"), kTopkThreads, smem, ctx.stream()>>>(p, cap);
  DSV4_CUDA_CHECK_LAUNCH();
}

}  // namespace dsv4::cuda
