// Lightning indexer scores (contracts in attn_ops.h, kernel choices in indexer_kernels.h; CPU twin:
// index_topk in src/model/indexer.cpp). The keys are read from their compact records in place
// (kv_record.cuh: the FP4 grid values as bf16). The top-k is in indexer_topk.cu.
#include <cmath>

#include "backend/cuda/attn_ops.h"
#include "backend/cuda/check.h"
#include "backend/cuda/indexer_kernels.h"
#include "backend/cuda/kernel_util.cuh"
#include "backend/cuda/kv_record.cuh"
#include "backend/cuda/mma.cuh"
#include "backend/cuda/quant_sim.cuh"

namespace dsv4::cuda {
namespace {

constexpr int kScoreWarps = 8;

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
  const int64_t row = p.key_rows.row(int64_t(p.slots[t]), s);
  if (row < 0) {  // no page: not an entry the backend emitted
    if (lane == 0) p.scores[t * p.max_entries + s] = -INFINITY;
    return;
  }
  const uint8_t* k = p.keys + row * p.key_rec.bytes;
  float total = 0.0f;
  for (int h = 0; h < p.heads; ++h) {
    float dot = 0.0f;
    for (int i = lane; i < p.dim; i += 32) dot = fmaf(sq[h * p.dim + i], rec::indexer_value(k, p.key_rec, i), dot);
    dot = warp_sum(dot);
    const float term = qsim::bf16r(__fmul_rn(qsim::bf16r(fmaxf(dot, 0.0f)), sw[h]));
    total = __fadd_rn(total, term);
  }
  if (lane == 0) p.scores[t * p.max_entries + s] = qsim::bf16r(total);
}


// ---- Tensor-core scores: block (token, 64-entry tile), 4 warps. Shared memory holds the token's q
// [H, DIM] and the tile's keys [64, DIM] as bf16 rows padded by 8 elements (row stride DIM + 8: the
// fragment loads of the 8 row groups land in distinct banks); warp w computes the dots of entries
// 16w..16w+15 with every head (H/16 x 2 MMA tiles, DIM/16 k-steps). The ReLU-weighted bf16 terms go to
// shared memory [H][64] (reusing the key rows) and thread e < 64 sums entry e's terms in head order.
constexpr int kMmaEntries = 64;
constexpr int kMmaGroup = 8;  // tokens of one run per block
constexpr int kMmaThreads = 128;


// Block (token group, 64-entry tile): the tile's key records are decoded to bf16 once for the group's
// tokens of one sequence (a prefill run: G consecutive tokens; decoded again where the slot changes),
// then each token's 64 heads x 64 entries go through mma.sync. Per token the products, terms and sums
// are those of a block per token: the same bits.
template <int H, int DIM, int G>
__global__ void __launch_bounds__(kMmaThreads) indexer_scores_mma_kernel(IndexerScoreParams p) {
  constexpr int LD = DIM + 8;             // padded row, bf16 elements
  static_assert(H * kMmaEntries * 4 <= H * LD * 2, "the terms reuse the query rows");
  __shared__ __align__(16) bf16 qs[H * LD];
  __shared__ __align__(16) bf16 ks[kMmaEntries * LD];
  __shared__ float sw[H];
  __shared__ int64_t tslot[G], tsend[G];
  float* terms = reinterpret_cast<float*>(qs);  // [H][kMmaEntries] after a token's MMAs

  const int64_t t0 = int64_t(blockIdx.x) * G;
  const int64_t s0 = int64_t(blockIdx.y) * kMmaEntries;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int n = int(p.tokens - t0 < G ? p.tokens - t0 : G);
  if (tid < n) {
    const int64_t nvis = (int64_t(p.positions[t0 + tid]) + 1) / p.ratio;
    tslot[tid] = p.slots[t0 + tid];
    tsend[tid] = nvis < p.max_entries ? nvis : p.max_entries;
  }
  __syncthreads();
  constexpr int kVec = DIM / 8;  // 16-byte vectors per row
  int64_t loaded = -1;           // the slot whose tile is in ks
  for (int j = 0; j < n; ++j) {
    const int64_t t = t0 + j, slot = tslot[j], send = tsend[j];
    if (s0 >= send) {  // the whole tile is invisible to this token
      for (int i = tid; i < kMmaEntries; i += kMmaThreads)
        if (s0 + i < p.max_entries) p.scores[t * p.max_entries + s0 + i] = -INFINITY;
      continue;
    }
    if (slot != loaded) {  // the rows the group's tokens of this slot see
      int64_t rows = send;
      for (int i = j + 1; i < n; ++i)
        if (tslot[i] == slot && tsend[i] > rows) rows = tsend[i];
      for (int i = tid; i < kMmaEntries * kVec; i += kMmaThreads) {
        const int r = i / kVec, c = (i % kVec) * 8;
        uint4 v = make_uint4(0, 0, 0, 0);
        const int64_t row = s0 + r < rows ? p.key_rows.row(slot, s0 + r) : -1;
        if (row >= 0) v = rec::indexer_load8(p.keys + row * p.key_rec.bytes, p.key_rec, c);
        *reinterpret_cast<uint4*>(ks + r * LD + c) = v;
      }
      loaded = slot;
    }
    const bf16* qg = p.q + t * H * DIM;
    for (int i = tid; i < H * kVec; i += kMmaThreads) {
      const int r = i / kVec, c = (i % kVec) * 8;
      *reinterpret_cast<uint4*>(qs + r * LD + c) = *reinterpret_cast<const uint4*>(qg + int64_t(r) * DIM + c);
    }
    for (int h = tid; h < H; h += kMmaThreads)
      sw[h] = qsim::bf16r(__fmul_rn(__bfloat162float(p.w[t * H + h]), p.wscale));
    __syncthreads();

    const int g = lane >> 2, c2 = (lane & 3) * 2;
    float acc[H / 16][2][4];
#pragma unroll
    for (int mi = 0; mi < H / 16; ++mi)
#pragma unroll
      for (int ni = 0; ni < 2; ++ni)
#pragma unroll
        for (int r = 0; r < 4; ++r) acc[mi][ni][r] = 0.0f;
    auto ld32 = [](const bf16* ptr) { return *reinterpret_cast<const uint32_t*>(ptr); };
#pragma unroll
    for (int kk = 0; kk < DIM; kk += 16) {
      uint32_t b[2][2];
#pragma unroll
      for (int ni = 0; ni < 2; ++ni) {
        const bf16* kr = ks + (warp * 16 + ni * 8 + g) * LD + kk + c2;
        b[ni][0] = ld32(kr);
        b[ni][1] = ld32(kr + 8);
      }
#pragma unroll
      for (int mi = 0; mi < H / 16; ++mi) {
        const bf16* q0 = qs + (mi * 16 + g) * LD + kk + c2;
        const bf16* q8 = q0 + 8 * LD;
        const uint32_t a0 = ld32(q0), a1 = ld32(q8), a2 = ld32(q0 + 8), a3 = ld32(q8 + 8);
#pragma unroll
        for (int ni = 0; ni < 2; ++ni) mma_bf16_16816(acc[mi][ni], a0, a1, a2, a3, b[ni][0], b[ni][1]);
      }
    }
    __syncthreads();  // every warp is done reading the query rows: reuse them for the terms
#pragma unroll
    for (int mi = 0; mi < H / 16; ++mi)
#pragma unroll
      for (int ni = 0; ni < 2; ++ni)
#pragma unroll
        for (int r = 0; r < 4; ++r) {
          const int h = mi * 16 + g + (r >= 2 ? 8 : 0);
          const int e = warp * 16 + ni * 8 + c2 + (r & 1);
          terms[h * kMmaEntries + e] = qsim::bf16r(__fmul_rn(qsim::bf16r(fmaxf(acc[mi][ni][r], 0.0f)), sw[h]));
        }
    __syncthreads();
    if (tid < kMmaEntries && s0 + tid < p.max_entries) {
      float total = -INFINITY;
      if (s0 + tid < send) {
        total = 0.0f;
#pragma unroll 8
        for (int h = 0; h < H; ++h) total = __fadd_rn(total, terms[h * kMmaEntries + tid]);
        total = qsim::bf16r(total);
      }
      p.scores[t * p.max_entries + s0 + tid] = total;
    }
    __syncthreads();  // the terms and sw are read before the next token overwrites them (and ks on a reload)
  }
}

}  // namespace

bool indexer_scores_mma_supported(const IndexerScoreParams& p) { return p.heads == 64 && p.dim == 128; }

void indexer_scores_with(const DeviceContext& ctx, const IndexerScoreParams& p, IndexerScoreKernel kernel) {
  if (p.tokens == 0 || p.max_entries == 0) return;
  if (!p.q || !p.w || !p.keys || !p.scores || !p.positions || !p.slots || !p.key_rows.pages)
    fail("indexer_scores: null pointer");
  if (p.key_rows.per_page <= 0) fail("indexer_scores: ", p.key_rows.per_page, " entries per page");
  if (p.ratio <= 0 || p.heads <= 0 || p.dim <= 0 || p.dim % 8 != 0) fail("indexer_scores: bad shape");
  if (p.key_rec.dim != p.dim || p.key_rec.bytes <= 0 || p.key_rec.bytes % kIndexerKeyAlign != 0 ||
      reinterpret_cast<uintptr_t>(p.keys) % kIndexerKeyAlign != 0)
    fail("indexer_scores: key records of ", p.key_rec.dim, " dims in ", p.key_rec.bytes,
         " bytes do not fit keys of ", p.dim, " dims (4-byte aligned records)");
  if (kernel == IndexerScoreKernel::Auto)
    kernel = indexer_scores_mma_supported(p) ? IndexerScoreKernel::Mma : IndexerScoreKernel::Warp;
  if (kernel == IndexerScoreKernel::Mma) {
    if (!indexer_scores_mma_supported(p))
      fail("indexer_scores: the tensor-core kernel takes 64 heads of 128 dims, not ", p.heads, " x ", p.dim);
    // Prefill runs: a tile's keys decoded once for kMmaGroup tokens; decode batches: a block per token
    // (every token its own sequence, and the blocks the short lists need).
    const int group = p.run_len >= kMmaGroup ? kMmaGroup : 1;
    const dim3 grid(narrow_int(ceil_div(p.tokens, group), "indexer_scores tokens"),
                    narrow_int(ceil_div(p.max_entries, kMmaEntries), "indexer_scores entry tiles"));
    if (group == 1) indexer_scores_mma_kernel<64, 128, 1><<<grid, kMmaThreads, 0, ctx.stream()>>>(p);
    else indexer_scores_mma_kernel<64, 128, kMmaGroup><<<grid, kMmaThreads, 0, ctx.stream()>>>(p);
    DSV4_CUDA_CHECK_LAUNCH();
    return;
  }
  const size_t smem = size_t(p.heads * p.dim + p.heads) * sizeof(float);
  if (smem > 48 * 1024)
    allow_max_dynamic_smem(ctx, indexer_scores_kernel);
  const dim3 grid(narrow_int(p.tokens, "indexer_scores tokens"),
                  narrow_int(ceil_div(p.max_entries, kScoreWarps), "indexer_scores entry groups"));
  indexer_scores_kernel<<<grid, kScoreWarps * 32, smem, ctx.stream()>>>(p);
  DSV4_CUDA_CHECK_LAUNCH();
}

void indexer_scores(const DeviceContext& ctx, const IndexerScoreParams& p) {
  indexer_scores_with(ctx, p, IndexerScoreKernel::Auto);
}

}  // namespace dsv4::cuda
