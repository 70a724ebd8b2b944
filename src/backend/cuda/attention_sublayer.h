// The attention sub-layer of one DeepSeek-V4 layer on the GPU (MODEL.md §4-§6), official numerics,
// for a batch of sequences each at its own position, as the backend's ops (backend/backend.h): the
// CPU backend's attention step by step (compressor, indexer, quantization sites):
//
//   attn_qkv     Q : wq_a (FP8) -> q_norm -> bf16 -> wq_b (FP8) -> per-head unweighted norm (bf16 op by
//                op) -> RoPE;  KV: wkv (FP8) -> kv_norm -> bf16 -> RoPE -> FP8 snap of the non-rope dims
//   attn_compress  CSA/HCA: the compressor (fp32 projections, gated pooling, norm, RoPE at the block
//                start, KV grid) appends entries; CSA: the indexer's compressor (Hadamard + FP4 keys)
//   attn_index_topk  CSA: the lightning indexer's queries, head weights, scores and top-k
//   attn_attend  key lists, sparse attention with sinks over window ring + compressed entries, inverse
//                RoPE, then the ring takes this call's KV
//   attn_out     grouped wo_a (bf16 GEMM per group), wo_b (FP8): the sub-layer's output
//
// Batches: `tokens` rows of x in runs of `run_len` consecutive tokens of one sequence (decode: run_len
// 1, one token per sequence; prefill: one run of T tokens). Positions and state slots are read on the
// device, so a decode call with a fixed token count can be captured in a CUDA graph once its GEMM
// plans exist (prepare()). Everything is enqueued on ctx.stream(); nothing synchronizes. The kernels of
// the linears come from the table of linear_choice.h.
#pragma once
#include <cuda_bf16.h>

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <tuple>
#include <vector>

#include "backend/cuda/attn_ops.h"
#include "backend/cuda/buffer.h"
#include "backend/cuda/context.h"
#include "backend/cuda/gemm.h"
#include "backend/cuda/kv_record.h"
#include "backend/backend.h"
#include "io/config.h"
#include "io/weight_tree.h"
#include "io/weights.h"

namespace dsv4::cuda {

using bf16 = __nv_bfloat16;

// A linear weight as its GEMM reads it: FP8 checkpoint weights run the official FP8 linear (input
// act-quantized 1x128, block-scaled GEMM); dense (bf16) ones a bf16 GEMM. Either way bf16 out.
struct DevLinear {
  bool fp8 = false;
  Fp8Weight w8;            // fp8: codes [out, in] + BLK128x128 scales
  DeviceBuffer<bf16> w16;  // dense: [out, in] bf16
  int64_t out = 0, in = 0;
};

struct DevCompressorWeights;
struct DevAttentionWeights;
struct DevMoeWeights;  // moe_sublayer.h

// The CUDA backend's leaves of the one tree (io/weight_tree.h): FP8 projections kept as stored, the
// plain-matmul weights as bf16 (FP8 checkpoints dequantized, exact), vectors as fp32. The nodes below
// add what the kernels read besides the weights; the MoE node is the backend's own (moe_sublayer.h:
// routed experts stacked and re-laid out per format, not the tree's per-expert leaves).
struct DevLeaves {
  using Linear = DevLinear;
  using Matrix = DeviceBuffer<bf16>;  // wo_a, compressor wkv / wgate (fp32 products), weights_proj
  using Vec = DeviceBuffer<float>;
  using Embed = DeviceBuffer<bf16>;   // [V, D]
  using Head = DeviceBuffer<bf16>;    // [V, D] (dense checkpoints only)
  using Compressor = DevCompressorWeights;
  using Attention = DevAttentionWeights;
  using Moe = DevMoeWeights;
};

struct DevCompressorWeights : CompressorT<DevLeaves> {
  int ratio = 0, dc = 0;
  bool overlap = false;  // CSA: c = 2 (A and B halves)
};
using DevIndexerWeights = IndexerT<DevLeaves>;  // compressor: dc = dI, overlap

struct DevAttentionWeights : AttentionT<DevLeaves> {
  LayerSpec spec;
  // The fast tier's wo_a of an FP8 checkpoint as stored (codes + scales, half the bytes of a bf16 wo_a)
  // where io/memory_plan.h wo_a_as_codes holds; the bf16 wo_a is then empty (attn_out widens the codes above
  // fast_gemv's tokens: linear_choice.h). Empty in the exact tier and for dense checkpoints (bf16 wo_a).
  Fp8Weight wo_a8;
  DeviceBuffer<float> inv_freq;  // [rope_dim / 2] of this layer's rope table
};

// One FP8 or dense linear weight as run_linear reads it (also the MTP blocks' e_proj / h_proj).
DevLinear upload_linear(const LinearWeight& w);
// A weight's logical values as bf16 (exact for bf16 and FP8 checkpoints; throws where bf16 cannot hold them).
DeviceBuffer<bf16> upload_dense_bf16(const LinearWeight& w);
// Any float tensor (bf16 / f16 / f32) as fp32 on the device.
DeviceBuffer<float> upload_f32(const TensorView& v);

// The additions of a layer's attention node once its leaves are uploaded (spec, RoPE table, compressor
// geometry); checks that the layer's kind has its compressor / indexer.
void finish_attention_weights(DevAttentionWeights& d, const AttentionWeights& w, const ModelConfig& cfg,
                              const LayerSpec& spec);

// Device state of one layer for up to `max_seqs` sequences (slots) of up to `max_ctx` positions.
// Rows a key list names: [ring: max_seqs * W][chunk: max_tokens_padded] bf16 rows [.., d] in `kv`, then
// [pool: pool_pages * per_page] compact records (kv_record.h) in `entry_records`; the chunk rows hold
// the current call's KV (queries of a prefill chunk longer than W must not read ring slots the chunk
// itself overwrote); the ring is written after the attention. The pool is this layer's part of the KV
// page pool (backend/kv_pages.h): page p holds entries [p * per_page, (p + 1) * per_page) of whichever
// sequence's page table names p (`pages`, the backend's table of the layer's group); `key_records`
// likewise for the indexer keys (FP4 records).
// No reset is needed when a slot starts a new sequence at position 0: every piece of state is written
// before it is read (block slots, the CSA previous block from block 1 on, ring slots within the window,
// the fresh pages the backend takes for it).
struct AttentionLayerState {
  AttentionLayerState(const ModelConfig& cfg, const LayerSpec& spec, int64_t max_seqs, int64_t max_ctx,
                      int64_t max_tokens, int64_t pool_pages, int64_t page_tokens);
  int64_t max_seqs = 0, max_ctx = 0, window = 0, head_dim = 0;
  int64_t chunk_rows = 0;       // max_tokens padded for the FP8 GEMM
  int64_t max_entries = 0;      // main compressor entries per sequence: max_ctx / ratio (0 sliding)
  int64_t pool_pages = 0, per_page = 0;  // pages of the pool, entries per page (0 sliding)
  int64_t pool_rows() const { return pool_pages * per_page; }
  int64_t ring_base() const { return 0; }
  int64_t chunk_base() const { return max_seqs * window; }
  int64_t pool_base() const { return chunk_base() + chunk_rows; }
  PagedRows pages;              // the page table of the layer's group (set by the backend)
  DeviceBuffer<bf16> kv;        // [ring + chunk rows, d] as above
  KvRecordGeom entry_rec;       // main entries' records (compressed layers)
  DeviceBuffer<uint8_t> entry_records;  // [pool_rows, entry_rec.bytes]
  // Main compressor partial state (CSA / HCA).
  DeviceBuffer<float> cur_a, cur_g;    // [max_seqs, ratio, c*d]
  DeviceBuffer<float> prev_a, prev_g;  // [max_seqs, ratio, d] (CSA)
  // Indexer (CSA).
  DeviceBuffer<float> icur_a, icur_g, iprev_a, iprev_g;  // as above with dc = dI
  IndexerRecordGeom key_rec;           // Hadamard + FP4 keys' records
  DeviceBuffer<uint8_t> key_records;   // [pool_rows, key_rec.bytes]

  // What slot `slot` owns outside the pool, as contiguous device byte ranges (ring rows, compressor and
  // indexer partial windows): a slot snapshot copies these.
  struct Piece {
    void* data = nullptr;
    size_t bytes = 0;
  };
  std::vector<Piece> slot_pieces(int64_t slot);
  // This layer's rows of pool page `page` (entries, then indexer keys): what a snapshot copies of a
  // partial page.
  std::vector<Piece> page_pieces(int32_t page);
  // Bytes of one page in this layer (the sum of page_pieces): its entry and key records.
  size_t page_bytes() const { return size_t(per_page) * size_t(entry_rec.bytes + key_rec.bytes); }
};

// Scratch of the attention ops for up to `max_tokens` tokens per call, shared by all layers of a
// model and its MTP blocks (sized from the config: cfg.layers and cfg.mtp_layers), plus the cuBLASLt plans, made once per (kind, out, in, tokens).
class AttentionWorkspace {
 public:
  // `wo_a_codes`: the weights hold wo_a as FP8 codes (DevAttentionWeights::wo_a8): also the bf16 rows they
  // are widened into (io/memory_plan.h wo_a_scratch_bytes).
  AttentionWorkspace(const ModelConfig& cfg, int64_t max_tokens, int64_t max_ctx, bool wo_a_codes = false);
  int64_t max_tokens() const { return max_tokens_; }
  // The plan for a shape, made on first use (a host-side cuBLASLt query, no device work).
  LtMatmul& plan(const DeviceContext& ctx, GemmKind kind, int64_t out, int64_t in, int64_t tokens,
                 const LtGroups& groups = {});
  // Makes every plan a call with `tokens` tokens will use (call before capturing a graph).
  void prepare(const DeviceContext& ctx, const ModelConfig& cfg, const DevAttentionWeights& w, int64_t tokens);

  int64_t max_tokens_ = 0, max_padded_ = 0, max_keys_ = 0, max_entries_ = 0;
  DeviceBuffer<uint8_t> codes;   // [P, max(D, qr, G*ro)] FP8 GEMM inputs
  DeviceBuffer<float> scales;    // [max_in/128 * P]
  DeviceBuffer<bf16> cq, q, o, z, y;  // [P, qr], [P, H*d], [T, H*d], [P, G*ro], [P, D]
  // The compressors' scratch, one set per CompressorKind (the two may run at once, on lanes): fp32
  // projections [T, 2*dc] and the pooled rows [T, dc] (dc: head_dim for Main, index_head_dim for Indexer).
  struct CompressorScratch {
    DeviceBuffer<float> ca, cg;
    DeviceBuffer<bf16> pooled;
  };
  CompressorScratch comp[2];
  // The indexer's FP8 input codes where it cannot share the q_norm's (q_codes_fused false): [P, qr].
  DeviceBuffer<uint8_t> icodes;
  DeviceBuffer<float> iscales;   // [qr/128 * P]
  DeviceBuffer<bf16> qi, wi;     // [P, HI*dI], [T, HI]
  DeviceBuffer<float> scores;    // [T, max_entries]
  DeviceBuffer<int32_t> selected;  // [T, topk]
  DeviceBuffer<int32_t> indices;   // [T, max_keys]
  DeviceBuffer<int32_t> split_tickets;  // [min(T, kSplitAttentionMaxTokens) * H] zeros: the split attention's combine
  DeviceBuffer<bf16> wo_a16;     // [n*ro, gin]: n groups of wo_a's codes widened (wo_a_scratch_groups)

 private:
  std::map<std::tuple<int, int64_t, int64_t, int64_t, LtGroups>, std::unique_ptr<LtMatmul>> plans_;
};

struct AttentionBatch {
  int64_t tokens = 0;                 // T <= workspace max_tokens
  int64_t run_len = 1;                // tokens per sequence in this call; tokens % run_len == 0
  const int32_t* positions = nullptr; // device [T]: position of each token (consecutive within a run)
  const int32_t* slots = nullptr;     // device [T]: state slot of each token's sequence
};

// What the ops of one layer's attention read and write.
struct AttentionCall {
  const ModelConfig& cfg;
  const DevAttentionWeights& w;
  AttentionLayerState& st;
  AttentionWorkspace& ws;
  AttentionBatch b;
};

// y [P, out] = linear(x [T, in]) in official numerics (LinearSite::Projection of linear_choice.h): FP8
// weights quantize x 1x128 into ws.codes / ws.scales first, dense weights take x as is; bf16 out. T <=
// ws.max_tokens(); y holds the cuBLASLt plan's padded rows P where the table picks cuBLASLt.
void run_linear(const DeviceContext& ctx, AttentionWorkspace& ws, const DevLinear& w, const bf16* x, int64_t T,
                bf16* y);

// Q into ws.q and this call's KV into the chunk rows of st, from x [T, D] bf16 (the attn-normed input),
// in two parts: attn_q_latent (wq_a and wkv, q_norm into ws.cq), then attn_q_heads (wq_b, the per-head
// norm and RoPE; kv_norm, RoPE and the snap of the KV rows). attn_qkv runs both.
void attn_q_latent(const DeviceContext& ctx, const AttentionCall& a, const bf16* x);
void attn_q_heads(const DeviceContext& ctx, const AttentionCall& a);
void attn_qkv(const DeviceContext& ctx, const AttentionCall& a, const bf16* x);
// The main compressor (CSA / HCA: entries into the pool) or the indexer's (CSA: FP4 keys) over x. Either
// may run beside the other and beside attn_qkv (own scratch: ws.comp[kind]).
void attn_compress(const DeviceContext& ctx, const AttentionCall& a, const bf16* x, CompressorKind kind);
// CSA: the indexer's top-k of each query into ws.selected (x: the sub-layer input, for weights_proj). It may
// run beside attn_q_heads: it reads ws.cq (and the q_norm's codes of it, q_codes_fused) only after
// `q_latent` (when given: a mark recorded on attn_q_latent's stream after it) and writes its own buffers.
void attn_index_topk(const DeviceContext& ctx, const AttentionCall& a, const bf16* x,
                     const StreamMark* q_latent = nullptr);
// Key lists, sparse attention with sinks and the inverse RoPE into ws.o; then the ring takes this call's KV
// (a decode step's rows went there in attn_q_heads already).
void attn_attend(const DeviceContext& ctx, const AttentionCall& a);
// out [T, D] bf16 = wo_b(grouped wo_a(ws.o)).
void attn_out(const DeviceContext& ctx, const AttentionCall& a, bf16* out);

}  // namespace dsv4::cuda
