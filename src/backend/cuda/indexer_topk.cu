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

// Radix select by one block of the k best of n scores sc[0, n) (entry i named base + i), the winners'
// sort keys into win[0, k) unordered (win holds cap >= k slots, the rest ~0):
//  1. four passes over the scores, 8 bits of desc_key each (most significant first), find the key value
//     V of the k-th best entry and how many entries with key V are needed (`need`): the entries with key
//     < V are all selected;
//  2. compaction: every entry with key < V, then the first `need` entries with key == V in index order
//     (a block-wide stable count over chunks of the index range).
// k >= n selects every entry. Called by every thread of the block; ends with the block synchronized.
__device__ void radix_select(const float* sc, int64_t n, uint32_t base, int k, uint64_t* win, int cap) {
  __shared__ int hist[256];
  __shared__ int warp_count[kTopkThreads / 32];
  __shared__ uint32_t s_prefix;
  __shared__ int s_need, s_count, s_base;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  for (int i = tid; i < cap; i += blockDim.x) win[i] = ~uint64_t(0);
  if (tid == 0) {
    s_prefix = 0;
    s_need = k;
    s_count = 0;
  }
  __syncthreads();
  if (k > 0 && k < n) {
    uint32_t mask = 0;
    for (int shift = 24; shift >= 0; shift -= 8) {
      for (int i = tid; i < 256; i += blockDim.x) hist[i] = 0;
      __syncthreads();
      const uint32_t prefix = s_prefix;
      for (int64_t i = tid; i < n; i += blockDim.x) {
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
  const bool all = k >= n;  // every entry is selected
  // Entries strictly better than V (or every entry).
  for (int64_t i = tid; i < n; i += blockDim.x) {
    const uint32_t v = desc_key(sc[i]);
    if (all || v < V) win[atomicAdd(&s_count, 1)] = (uint64_t(v) << 32) | (base + uint32_t(i));
  }
  __syncthreads();
  // The first `need` entries with key V, in index order.
  if (!all && k > 0) {
    const int need = s_need;
    if (tid == 0) s_base = 0;
    __syncthreads();
    for (int64_t c0 = 0; c0 < n; c0 += blockDim.x) {
      const int64_t i = c0 + tid;
      const bool hit = i < n && desc_key(sc[i]) == V;
      const unsigned ballot = __ballot_sync(0xffffffffu, hit);
      if (lane == 0) warp_count[warp] = __popc(ballot);
      __syncthreads();
      int before = 0, total = 0;
      for (int w = 0; w < int(blockDim.x / 32); ++w) {
        if (w < warp) before += warp_count[w];
        total += warp_count[w];
      }
      const int b0 = s_base;
      const int rank = b0 + before + __popc(ballot & ((1u << lane) - 1u));
      if (hit && rank < need) win[k - need + rank] = (uint64_t(V) << 32) | (base + uint32_t(i));
      __syncthreads();
      if (tid == 0) s_base = b0 + total;
      __syncthreads();
      if (s_base >= need) break;
    }
  }
  __syncthreads();
}

// One block per token: radix_select over the visible scores, then a bitonic sort of the k winners.
__global__ void __launch_bounds__(kTopkThreads) indexer_topk_radix_kernel(IndexerTopkParams p, int cap) {
  extern __shared__ uint64_t win[];  // [cap] winners' sort keys
  const int64_t t = blockIdx.x;
  const int64_t nvis = visible(p, t);
  const int k = int(imin64(p.k, nvis));
  radix_select(p.scores + t * p.max_entries, nvis, 0, k, win, cap);
  bitonic_sort(win, cap);
  for (int i = threadIdx.x; i < p.k; i += blockDim.x) p.selected[t * p.k + i] = i < k ? int32_t(uint32_t(win[i])) : -1;
}

// Split radix for few tokens over long lists (1M-token contexts: 262,144 entries in one block took
// ~0.68 ms): block (token, split) selects and sorts the k best of its `chunk` entries into
// cand[token][split][cap] (sort keys, ~0 padding); the merge block of a token places every candidate by
// its rank among all splits' candidates and keeps the first k.
// The global k best are among the splits' k best (the keys order entries strictly: score, then index),
// so the list is the single-block one exactly.
__global__ void __launch_bounds__(kTopkThreads) indexer_topk_split_kernel(IndexerTopkParams p, int cap, int64_t chunk,
                                                                          uint64_t* cand) {
  extern __shared__ uint64_t win[];  // [cap]
  const int64_t t = blockIdx.x;
  const int split = blockIdx.y;
  const int64_t nvis = visible(p, t), c0 = int64_t(split) * chunk;
  const int64_t n = c0 < nvis ? imin64(chunk, nvis - c0) : 0;
  const int k = int(imin64(p.k, n));
  radix_select(p.scores + t * p.max_entries + c0, n, uint32_t(c0), k, win, cap);
  bitonic_sort(win, cap);  // the split's winners in order, ~0 padding last
  uint64_t* out = cand + (t * gridDim.y + split) * cap;
  for (int i = threadIdx.x; i < cap; i += blockDim.x) out[i] = win[i];
}

// The merge by rank: every real candidate's place in the token's list is its place in its split plus,
// in every other split, the count of smaller keys (a binary search; the keys are distinct); those of
// place < k are written there.
__global__ void __launch_bounds__(kTopkThreads) indexer_topk_merge_kernel(IndexerTopkParams p, int splits, int cap,
                                                                          const uint64_t* cand) {
  extern __shared__ uint64_t keys[];  // [splits][cap], each split ascending
  const int64_t t = blockIdx.x;
  const int64_t nvis = visible(p, t);
  const int k = int(imin64(p.k, nvis)), all = splits * cap;
  for (int i = threadIdx.x; i < all; i += blockDim.x) keys[i] = cand[t * all + i];
  for (int i = threadIdx.x + k; i < p.k; i += blockDim.x) p.selected[t * p.k + i] = -1;
  __syncthreads();
  for (int i = threadIdx.x; i < all; i += blockDim.x) {
    const uint64_t key = keys[i];
    if (key == ~uint64_t(0)) continue;
    const int mine = i / cap;
    int place = i % cap;
    for (int l = 0; l < splits && place < k; ++l) {
      if (l == mine) continue;
      const uint64_t* list = keys + l * cap;
      int lo = 0, hi = cap;  // the count of list entries < key
      while (lo < hi) {
        const int mid = (lo + hi) >> 1;
        if (list[mid] < key) lo = mid + 1; else hi = mid;
      }
      place += lo;
    }
    if (place < k) p.selected[t * p.k + place] = int32_t(uint32_t(key));
  }
}

int pow2_at_least(int64_t n) {
  int cap = 2;
  while (cap < n) cap <<= 1;
  return cap;
}

// Splits of the split radix: chunks of at least kSplitMinChunk entries, all splits' candidates
// (splits x pow2(k)) within the merge's sort of kSplitMaxCandidates; 1 when that leaves no split.
constexpr int64_t kSplitMinChunk = 8192;
constexpr int64_t kSplitMaxCandidates = 8192;  // 64 KiB of sort keys in the merge block
constexpr int64_t kSplitMaxTokens = 32;        // more tokens than this fill the GPU with one block each

int topk_splits(const IndexerTopkParams& p) {
  const int64_t cap = pow2_at_least(p.k);
  int splits = 1;
  while (splits * 2 * cap <= kSplitMaxCandidates && p.max_entries / (splits * 2) >= kSplitMinChunk) splits *= 2;
  return splits;
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
  const bool chosen = kernel == IndexerTopkKernel::Auto;
  if (chosen) kernel = p.max_entries <= kBitonicAutoMax ? IndexerTopkKernel::Bitonic : IndexerTopkKernel::Radix;
  if (kernel == IndexerTopkKernel::Bitonic) {
    if (p.max_entries > kBitonicMaxEntries)
      fail("indexer_topk: ", p.max_entries, " entries exceed the shared-memory sort (", kBitonicMaxEntries, ")");
    return launch_topk(ctx, indexer_topk_bitonic_kernel, p, pow2_at_least(p.max_entries));
  }
  if (p.k > kRadixMaxK) fail("indexer_topk: k = ", p.k, " exceeds ", kRadixMaxK);
  const int splits = topk_splits(p);
  const int cap = pow2_at_least(p.k);
  const size_t cand_bytes = size_t(p.tokens) * size_t(splits) * size_t(cap) * sizeof(uint64_t);
  // Auto: the split radix for few tokens over lists long enough to split (a decode step at long context).
  const bool split = kernel == IndexerTopkKernel::RadixSplit ||
                     (chosen && splits > 1 && p.tokens <= kSplitMaxTokens && ctx.workspace() &&
                      cand_bytes <= ctx.workspace_bytes());
  if (!split) return launch_topk(ctx, indexer_topk_radix_kernel, p, cap);
  if (!ctx.workspace() || cand_bytes > ctx.workspace_bytes())
    fail("indexer_topk: the split radix's ", cand_bytes, " bytes of candidates exceed the ", ctx.workspace_bytes(),
         "-byte workspace");
  uint64_t* cand = static_cast<uint64_t*>(ctx.workspace());
  const int64_t chunk = ceil_div(p.max_entries, int64_t(splits));
  const size_t smem = size_t(cap) * sizeof(uint64_t);
  if (smem > 48 * 1024) allow_max_dynamic_smem(ctx, indexer_topk_split_kernel);
  indexer_topk_split_kernel<<<dim3(unsigned(narrow_int(p.tokens, "indexer_topk grid")), unsigned(splits)),
                              kTopkThreads, smem, ctx.stream()>>>(p, cap, chunk, cand);
  DSV4_CUDA_CHECK_LAUNCH();
  const size_t msmem = size_t(splits) * size_t(cap) * sizeof(uint64_t);
  if (msmem > 48 * 1024) allow_max_dynamic_smem(ctx, indexer_topk_merge_kernel);
  indexer_topk_merge_kernel<<<unsigned(p.tokens), kTopkThreads, msmem, ctx.stream()>>>(p, splits, cap, cand);
  DSV4_CUDA_CHECK_LAUNCH();
}

void indexer_topk(const DeviceContext& ctx, const IndexerTopkParams& p) {
  indexer_topk_with(ctx, p, IndexerTopkKernel::Auto);
}

}  // namespace dsv4::cuda
