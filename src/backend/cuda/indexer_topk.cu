// The indexer's top-k (contract in attn_ops.h, kernel choices in indexer_kernels.h; CPU twin: the
// partial_sort of index_topk in src/model/indexer.cpp): per token, the k visible entries with the best
// scores, best first, ties to the lower index, -1 past min(k, visible).
#include <cstdint>

#include "backend/cuda/attn_ops.h"
#include "backend/cuda/check.h"
#include "backend/cuda/indexer_kernels.h"
#include "backend/cuda/kernel_util.cuh"

namespace dsv4::cuda {
namespace {

constexpr int kTopkThreads = 1024;
constexpr int64_t kBitonicMaxEntries = 16384;  // 128 KiB of 64-bit sort keys in shared memory
constexpr int kRadixMaxK = 4096;               // the radix path sorts its k winners in 32 KiB
constexpr int64_t kBitonicAutoMax = 2048;      // Auto: bitonic up to here, radix above

__device__ __forceinline__ int64_t imin64(int64_t a, int64_t b) { return a < b ? a : b; }

// Order key of a score: ascending key = descending score (the sign-flip map of IEEE bits).
__device__ __forceinline__ uint32_t desc_key(float score) {
  uint32_t u = __float_as_uint(score);
  u = (u & 0x80000000u) ? ~u : (u | 0x80000000u);  // ascending with the score
  return ~u;
}
// Sort key: ascending order = descending score, then ascending index.
__device__ __forceinline__ uint64_t topk_key(float score, uint32_t idx) { return (uint64_t(desc_key(score)) << 32) | idx; }

// Ascending bitonic sort of keys[0, cap) (cap a power of two) by the whole block.
__device__ void bitonic_sort(uint64_t* keys, int cap) {
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
}

__device__ __forceinline__ int64_t visible(const IndexerTopkParams& p, int64_t t) {
  return imin64((int64_t(p.positions[t]) + 1) / p.ratio, p.max_entries);
}

__global__ void __launch_bounds__(kTopkThreads) indexer_topk_bitonic_kernel(IndexerTopkParams p, int cap) {
  extern __shared__ uint64_t keys[];  // [cap]
  const int64_t t = blockIdx.x;
  const int64_t nvis = visible(p, t);
  for (int i = threadIdx.x; i < cap; i += blockDim.x)
    keys[i] = i < nvis ? topk_key(p.scores[t * p.max_entries + i], uint32_t(i)) : ~uint64_t(0);
  bitonic_sort(keys, cap);
  for (int i = threadIdx.x; i < p.k; i += blockDim.x)
    p.selected[t * p.k + i] = (i < nvis && i < cap) ? int32_t(uint32_t(keys[i])) : -1;
}

// Radix select, one block per token:
//  1. four passes over the visible scores, 8 bits of desc_key each (most significant first), find the
//     key value V of the k-th best entry and how many entries with key V are needed (`need`): the
//     entries with key < V are all selected;
//  2. compaction: every entry with key < V, then the first `need` entries with key == V in index
//     order (a block-wide stable count over chunks of the index range);
//  3. a bitonic sort of the k winners' (key, index).
__global__ void __launch_bounds__(kTopkThreads) indexer_topk_radix_kernel(IndexerTopkParams p, int cap) {
  extern __shared__ uint64_t win[];  // [cap] winners' sort keys
  __shared__ int hist[256];
  __shared__ int warp_count[kTopkThreads / 32];
  __shared__ uint32_t s_prefix;
  __shared__ int s_need, s_count, s_base;
  const int64_t t = blockIdx.x;
  const int64_t nvis = visible(p, t);
  const float* sc = p.scores + t * p.max_entries;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int k = int(imin64(p.k, nvis));

  for (int i = tid; i < cap; i += blockDim.x) win[i] = ~uint64_t(0);
  if (tid == 0) {
    s_prefix = 0;
    s_need = k;
    s_count = 0;
  }
  __syncthreads();
  if (k > 0 && k < nvis) {
    uint32_t mask = 0;
    for (int shift = 24; shift >= 0; shift -= 8) {
      for (int i = tid; i < 256; i += blockDim.x) hist[i] = 0;
      __syncthreads();
      const uint32_t prefix = s_prefix;
      for (int64_t i = tid; i < nvis; i += blockDim.x) {
        const uint32_t v = desc_key(sc[i]);
        if ((v & mask) == prefix) atomicAdd(&hist[(v >> shift) & 255u], 1);
      }
      __syncthreads();
      if (tid == 0) {
        int need = s_need, d = 0;
        for (; d < 255 && hist[d] < need; ++d) need -= hist[d];
        s_need = need;
        s_prefix = prefix | (uint32_t(d) << shift);
      }
      mask |= 255u << shift;
      __syncthreads();
    }
  }
  const uint32_t V = s_prefix;
  const bool all = k >= nvis;  // every visible entry is selected
  // Entries strictly better than V (or every visible entry).
  for (int64_t i = tid; i < nvis; i += blockDim.x) {
    const uint32_t v = desc_key(sc[i]);
    if (all || v < V) win[atomicAdd(&s_count, 1)] = (uint64_t(v) << 32) | uint32_t(i);
  }
  __syncthreads();
  // The first `need` entries with key V, in index order.
  if (!all && k > 0) {
    const int need = s_need;
    if (tid == 0) s_base = 0;
    __syncthreads();
    for (int64_t c0 = 0; c0 < nvis; c0 += blockDim.x) {
      const int64_t i = c0 + tid;
      const bool hit = i < nvis && desc_key(sc[i]) == V;
      const unsigned ballot = __ballot_sync(0xffffffffu, hit);
      if (lane == 0) warp_count[warp] = __popc(ballot);
      __syncthreads();
      int before = 0, total = 0;
      for (int w = 0; w < int(blockDim.x / 32); ++w) {
        if (w < warp) before += warp_count[w];
        total += warp_count[w];
      }
      const int base = s_base;
      const int rank = base + before + __popc(ballot & ((1u << lane) - 1u));
      if (hit && rank < need) win[k - need + rank] = (uint64_t(V) << 32) | uint32_t(i);
      __syncthreads();
      if (tid == 0) s_base = base + total;
      __syncthreads();
      if (s_base >= need) break;
    }
  }
  bitonic_sort(win, cap);
  for (int i = tid; i < p.k; i += blockDim.x) p.selected[t * p.k + i] = i < k ? int32_t(uint32_t(win[i])) : -1;
}

int pow2_at_least(int64_t n) {
  int cap = 2;
  while (cap < n) cap <<= 1;
  return cap;
}

template <typename K>
void launch_topk(const DeviceContext& ctx, K kernel, const IndexerTopkParams& p, int cap) {
  const size_t smem = size_t(cap) * sizeof(uint64_t);
  if (smem > 48 * 1024) allow_max_dynamic_smem(ctx, kernel);
  kernel<<<narrow_int(p.tokens, "indexer_topk grid"), kTopkThreads, smem, ctx.stream()>>>(p, cap);
  DSV4_CUDA_CHECK_LAUNCH();
}

}  // namespace

void indexer_topk_with(const DeviceContext& ctx, const IndexerTopkParams& p, IndexerTopkKernel kernel) {
  if (p.tokens == 0) return;
  if (!p.scores || !p.selected || !p.positions) fail("indexer_topk: null pointer");
  if (p.k <= 0 || p.ratio <= 0) fail("indexer_topk: k and ratio must be positive");
  if (kernel == IndexerTopkKernel::Auto)
    kernel = p.max_entries <= kBitonicAutoMax ? IndexerTopkKernel::Bitonic : IndexerTopkKernel::Radix;
  if (kernel == IndexerTopkKernel::Bitonic) {
    if (p.max_entries > kBitonicMaxEntries)
      fail("indexer_topk: ", p.max_entries, " entries exceed the shared-memory sort (", kBitonicMaxEntries, ")");
    return launch_topk(ctx, indexer_topk_bitonic_kernel, p, pow2_at_least(p.max_entries));
  }
  if (p.k > kRadixMaxK) fail("indexer_topk: k = ", p.k, " exceeds ", kRadixMaxK);
  launch_topk(ctx, indexer_topk_radix_kernel, p, pow2_at_least(p.k));
}

void indexer_topk(const DeviceContext& ctx, const IndexerTopkParams& p) {
  indexer_topk_with(ctx, p, IndexerTopkKernel::Auto);
}

}  // namespace dsv4::cuda
