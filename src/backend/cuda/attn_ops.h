// Kernels of the attention sub-layer beyond ops.h (MODEL.md §4-§6): the official-numerics quantization
// sites (head norm, FP8 KV snap, Hadamard + FP4), the fp32 linear of the compressors, the compressor
// pooling and entry emission, the lightning indexer's scores and top-k, and the key lists / window ring
// of the sparse attention. Each has a CPU twin (named per op) and a test in tests/backend/cuda.
//
// Batches: `tokens` rows in runs of `run_len` consecutive tokens of one sequence; positions[t] and
// slots[t] (state slot of token t's sequence) are device arrays, read on the device.
// Conventions as in ops.h: enqueued on ctx.stream(), no sync, launch-time checks throw dsv4::Error.
#pragma once
#include <cuda_bf16.h>

#include <cstdint>

#include "backend/cuda/context.h"
#include "backend/cuda/kv_record.h"

namespace dsv4::cuda {

using bf16 = __nv_bfloat16;
class LtMatmul;

// Compressed entries (or indexer keys) in pages of the KV page pool (backend/kv_pages.h): entry j of slot
// s is row pages[s * max_pages + j / per_page] * per_page + j % per_page of the pool's rows, or nowhere
// (-1) when the slot has no such page. Kernels read through it for the visible entries only.
struct PagedRows {
  const int32_t* pages = nullptr;  // device [slots, max_pages], -1: no page
  int64_t max_pages = 0;
  int per_page = 0;                // entries per page (page_tokens / ratio)
#ifdef __CUDACC__
  __device__ __forceinline__ int64_t row(int64_t slot, int64_t j) const {
    const int64_t i = j / per_page;
    if (j < 0 || i >= max_pages) return -1;
    const int32_t page = pages[slot * max_pages + i];
    return page < 0 ? -1 : int64_t(page) * per_page + j % per_page;
  }
#endif
};

// ---- QuantSim::head_norm (official): per head of width d, sum_i bf16(v_i^2) in index order (fp32),
// mean = bf16(sum / d), r = bf16(1 / sqrt(bf16(mean + eps))), v_i = bf16(v_i * r). In place; bit-exact
// (a warp per (row, head), the sum on one lane in index order). The fast tier (ctx.kernels()) sums in
// a free order: lane L the squares of elements L, L + 32, ... in index order, then warp_sum's xor tree
// (lane L + lane L^16, then ^8, ^4, ^2, ^1); the rest as above.
struct HeadNormParams {
  bf16* x = nullptr;   // [rows, heads, dim], row stride row_stride
  int64_t rows = 0, row_stride = 0;  // row_stride even
  int heads = 0, dim = 0;  // dim even, <= 4096
  float eps = 1e-6f;
  // Optional (rope_dim > 0): then the forward RoPE of each head's last rope_dim dims at positions[row]
  // (inv_freq [rope_dim / 2]) in the same launch: the bits of head_norm_bf16 and then rope (ops.h).
  const int32_t* positions = nullptr;
  const float* inv_freq = nullptr;
  int rope_dim = 0;
};
void head_norm_bf16(const DeviceContext& ctx, const HeadNormParams& p);

// ---- fp8_sim (core/quant.h) of dims [0, nope) of each row in 64-blocks, in place (window KV and main
// compressor entries: QuantSim::kv). The forward runs it inside rms_norm's KV finish (ops.h); this launch
// is the unfused reference the finish is tested against.
struct KvSnapParams {
  bf16* x = nullptr;   // [rows, *], row stride row_stride
  int64_t rows = 0, row_stride = 0;
  int nope = 0;        // multiple of 64
};
void fp8_kv_snap(const DeviceContext& ctx, const KvSnapParams& p);

// ---- QuantSim::indexer_key: hadamard_bf16_inplace (core/hadamard.h) of each n-vector, then fp4_sim in
// 32-blocks, in place. n a power of two, 32..1024.
struct HadamardFp4Params {
  bf16* x = nullptr;   // [vectors, n], vector v at v * stride
  int64_t vectors = 0, stride = 0;
  int n = 128;
  // Optional (the indexer's queries): first the forward RoPE of each vector's last rope_dim dims at
  // positions[v / per_row] with inv_freq [rope_dim / 2], rounded to bf16: the bits of rope then hadamard_fp4.
  const int32_t* positions = nullptr;
  const float* inv_freq = nullptr;
  int rope_dim = 0, per_row = 1;
};
void hadamard_fp4(const DeviceContext& ctx, const HadamardFp4Params& p);

// ---- y[T, out] = x[T, in] . W[out, in]^T with bf16 operands, fp32 products and accumulation; fp32
// and/or bf16 (rounded once) out. CPU twin: cpu::matmul — bit-identical up to kExactLinearMaxTokens
// tokens (exact_linear, the twin's summation order), another order beyond: the cuBLASLt plan when one
// is given (x_stride == in; Bf16F32Out for y, Bf16 for y_bf16, one output), else a warp per output.
struct LinearF32Params {
  const bf16* x = nullptr;  // [tokens, in], row stride x_stride
  const bf16* w = nullptr;  // [out, in]
  float* y = nullptr;       // optional [tokens, out]
  bf16* y_bf16 = nullptr;   // optional [tokens, out]
  int64_t tokens = 0, x_stride = 0;
  int in = 0, out = 0;
  LtMatmul* plan = nullptr;  // optional, for tokens > kExactLinearMaxTokens: [out, in] x tokens
};
void linear_f32(const DeviceContext& ctx, const LinearF32Params& p);

// ---- Compressor, part 1 (compress_chunk up to the pooled value): for each token (in run order) store
// a and g + ape[slot] in its block slot pos % ratio; when the token completes its block (pos % ratio ==
// ratio - 1), pool per channel: softmax over the block's gates (CSA: the previous block's A-halves
// first, from block 1 on) weighting the values, fp32, rounded to bf16 into pooled[t]; then (CSA) the
// block's A-halves become the previous block. Rows of tokens that complete no block are not written.
// The tokens come in runs of run_len: one slot at consecutive positions per run (a prefill chunk, or
// run_len 1 for a decode batch); the blocks of a run pool in parallel.
struct CompressorPoolParams {
  const float* a = nullptr;    // [tokens, c*dc] wkv projection
  const float* g = nullptr;    // [tokens, c*dc] wgate projection
  const float* ape = nullptr;  // [ratio, c*dc]
  float* cur_a = nullptr;      // [slots, ratio, c*dc]
  float* cur_g = nullptr;      // [slots, ratio, c*dc]
  float* prev_a = nullptr;     // [slots, ratio, dc] (overlap only)
  float* prev_g = nullptr;     // [slots, ratio, dc] (overlap only)
  bf16* pooled = nullptr;      // [tokens, dc]
  const int32_t* positions = nullptr;  // [tokens]
  const int32_t* slots = nullptr;      // [tokens]
  int64_t tokens = 0, run_len = 1;
  int ratio = 0, dc = 0;
  bool overlap = false;
};
void compressor_pool(const DeviceContext& ctx, const CompressorPoolParams& p);

// ---- Compressor, part 2: each pooled row of a completing token t becomes entry j = pos / ratio of its
// slot (row entry_rows.row(slot, j) of the pool; a slot without that page writes nothing): RMSNorm(norm)
// -> bf16 -> RoPE at j * ratio on the trailing rope dims -> bf16 -> main: fp8_sim of dims
// [0, dc - rope_dim) in 64-blocks; indexer: Hadamard(dc) + FP4 (32-blocks); stored as that row's
// compact record (kv_record.h: main entries kv_rec, indexer keys key_rec).
struct CompressorEmitParams {
  const bf16* pooled = nullptr;      // [tokens, dc]
  const float* norm = nullptr;       // [dc]
  const float* inv_freq = nullptr;   // [rope_dim / 2]
  uint8_t* records = nullptr;        // the pool's records [pages * per_page, record bytes], 8-byte aligned
  KvRecordGeom kv_rec;               // main entries (dc = kv_rec.nope + kv_rec.rope)
  IndexerRecordGeom key_rec;         // indexer keys (dc = key_rec.dim)
  PagedRows entry_rows;
  const int32_t* positions = nullptr;
  const int32_t* slots = nullptr;
  int64_t tokens = 0;
  int ratio = 0, dc = 0, rope_dim = 64;
  bool indexer = false;
  float eps = 1e-6f;
};
void compressor_emit(const DeviceContext& ctx, const CompressorEmitParams& p);

// ---- Lightning indexer scores (index_topk): for entry s < min((pos+1)/ratio, max_entries) of token t's
// slot (key row key_rows.row(slot, s) of the pool),
// score = bf16(sum_h bf16(bf16(relu(q_h . k_s)) * bf16(w_h * wscale))), heads summed in order.
// Entries past the visible count get -inf.
struct IndexerScoreParams {
  const bf16* q = nullptr;     // [tokens, heads, dim] (rotated, Hadamard + FP4)
  const bf16* w = nullptr;     // [tokens, heads] weights_proj output (bf16)
  const uint8_t* keys = nullptr;  // the pool's key records [pages * per_page, key_rec.bytes], 4-byte aligned
  IndexerRecordGeom key_rec;      // key_rec.dim == dim
  PagedRows key_rows;          // the visible entries must have pages
  float* scores = nullptr;     // [tokens, max_entries]
  const int32_t* positions = nullptr;
  const int32_t* slots = nullptr;
  int64_t tokens = 0, max_entries = 0;
  int64_t run_len = 1;         // tokens per sequence run (prefill: > 1 lets consecutive tokens share a key tile)
  int heads = 0, dim = 0, ratio = 0;
  float wscale = 0;
};
void indexer_scores(const DeviceContext& ctx, const IndexerScoreParams& p);

// ---- Top-k of each token's visible scores, best first, ties to the lower index; -1 past
// min(k, visible). Any max_entries (a bitonic sort in shared memory up to 2048 entries, a radix select
// above, split over several blocks per token for few tokens over long lists; indexer_kernels.h);
// k <= 4096. The split radix uses the context's workspace.
struct IndexerTopkParams {
  const float* scores = nullptr;  // [tokens, max_entries]
  int32_t* selected = nullptr;    // [tokens, k]
  const int32_t* positions = nullptr;
  int64_t tokens = 0, max_entries = 0;
  int k = 0, ratio = 0;
};
void indexer_topk(const DeviceContext& ctx, const IndexerTopkParams& p);

// ---- Key rows of each query for sparse_attention (attention.cpp's key list): window positions
// max(0, pos-W+1)..pos (this call's tokens from the chunk rows, earlier ones from the ring), then
// HCA: all visible entries j < (pos+1)/ratio; CSA: the selected entries in order. -1 fills the rest.
struct KeyListParams {
  int32_t* indices = nullptr;          // [tokens, max_keys]
  const int32_t* positions = nullptr;  // [tokens]
  const int32_t* slots = nullptr;      // [tokens]
  const int32_t* selected = nullptr;   // CSA: [tokens, topk]; null otherwise
  int64_t tokens = 0, run_len = 1;
  int window = 0, max_keys = 0, topk = 0;
  int ratio = 0;                       // 0: no compressed entries
  int64_t ring_base = 0;               // kv row of (slot s, ring slot i): ring_base + s * window + i
  int64_t chunk_base = 0;              // kv row of this call's token t: chunk_base + t
  int64_t pool_base = 0, max_entries = 0;  // entry j < max_entries of slot s: pool_base + entry_rows.row(s, j)
  PagedRows entry_rows;
  int64_t pool_rows = 0;               // rows of the pool (pages * per_page)
};
void build_key_list(const DeviceContext& ctx, const KeyListParams& p);

// ---- Window ring write: chunk row t -> ring (slot, pos % W) for the last W tokens of each run.
struct RingWriteParams {
  bf16* kv = nullptr;                  // the layer's kv rows
  const int32_t* positions = nullptr;
  const int32_t* slots = nullptr;
  int64_t tokens = 0, run_len = 1, ring_base = 0, chunk_base = 0;
  int window = 0, dim = 0;
};
void ring_write(const DeviceContext& ctx, const RingWriteParams& p);

}  // namespace dsv4::cuda
