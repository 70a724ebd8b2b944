// attention_forward and its state / workspace (attention_layer.h). The op sequence mirrors
// Model::attention (src/model/attention.cpp) step by step; each step's numerics are its kernel's.
#include "model_cuda/attention_layer.h"

#include <algorithm>
#include <cmath>

#include "backend/cuda/attn_ops.h"
#include "backend/cuda/check.h"
#include "backend/cuda/linear_exact.h"
#include "backend/cuda/linear_fast.h"
#include "backend/cuda/ops.h"
#include "core/error.h"

namespace dsv4::cuda {
namespace {

int64_t round16(int64_t n) { return (n + 15) / 16 * 16; }

int64_t max_entries_of(const LayerSpec& spec, int64_t max_ctx) {
  return spec.attn == AttnKind::Sliding ? 0 : max_ctx / spec.ratio;
}

int64_t max_keys_of(const ModelConfig& cfg, const LayerSpec& spec, int64_t max_ctx) {
  if (spec.attn == AttnKind::CSA) return cfg.sliding_window + cfg.index_topk;
  return cfg.sliding_window + max_entries_of(spec, max_ctx);
}

template <typename T>
void zero(DeviceBuffer<T>& b) { b.fill_bytes(0); }

}  // namespace

AttentionLayerState::AttentionLayerState(const ModelConfig& cfg, const LayerSpec& spec, int64_t max_seqs_,
                                         int64_t max_ctx_, int64_t max_tokens)
    : max_seqs(max_seqs_), max_ctx(max_ctx_), window(cfg.sliding_window), head_dim(cfg.head_dim),
      chunk_rows(round16(max_tokens)), max_entries(max_entries_of(spec, max_ctx_)) {
  if (max_seqs <= 0 || max_ctx <= 0 || max_tokens <= 0) fail("AttentionLayerState: empty capacity");
  kv = DeviceBuffer<bf16>(size_t((pool_base() + max_seqs * max_entries) * head_dim));
  zero(kv);
  if (spec.attn != AttnKind::Sliding) {
    const int64_t m = spec.ratio, c = spec.attn == AttnKind::CSA ? 2 : 1, d = head_dim;
    cur_a = DeviceBuffer<float>(size_t(max_seqs * m * c * d));
    cur_g = DeviceBuffer<float>(size_t(max_seqs * m * c * d));
    if (c == 2) {
      prev_a = DeviceBuffer<float>(size_t(max_seqs * m * d));
      prev_g = DeviceBuffer<float>(size_t(max_seqs * m * d));
    }
  }
  if (spec.attn == AttnKind::CSA) {
    const int64_t m = spec.ratio, dI = cfg.index_head_dim;
    icur_a = DeviceBuffer<float>(size_t(max_seqs * m * 2 * dI));
    icur_g = DeviceBuffer<float>(size_t(max_seqs * m * 2 * dI));
    iprev_a = DeviceBuffer<float>(size_t(max_seqs * m * dI));
    iprev_g = DeviceBuffer<float>(size_t(max_seqs * m * dI));
    index_keys = DeviceBuffer<bf16>(size_t(max_seqs * max_entries * dI));
    zero(index_keys);
  }
}

AttentionWorkspace::AttentionWorkspace(const ModelConfig& cfg, int64_t max_tokens, int64_t max_ctx)
    : max_tokens_(max_tokens), max_padded_(round16(max_tokens)) {
  if (max_tokens <= 0) fail("AttentionWorkspace: max_tokens must be positive");
  const int64_t D = cfg.hidden_size, H = cfg.num_heads, d = cfg.head_dim, qr = cfg.q_lora_rank;
  const int64_t G = cfg.o_groups, ro = cfg.o_lora_rank, gin = H * d / G;
  const int64_t HI = cfg.index_n_heads, dI = cfg.index_head_dim, T = max_tokens, P = max_padded_;
  bool any_csa = false;
  for (const LayerSpec& l : cfg.layers) {
    max_keys_ = std::max(max_keys_, max_keys_of(cfg, l, max_ctx));
    if (l.attn == AttnKind::CSA) {
      any_csa = true;
      max_entries_ = std::max(max_entries_, max_entries_of(l, max_ctx));
    }
  }
  const int64_t max_in = std::max({D, qr, G * ro});
  codes = DeviceBuffer<uint8_t>(size_t(P * max_in));
  scales = DeviceBuffer<float>(size_t((max_in + 127) / 128 * P));
  zero(codes);
  zero(scales);
  cq = DeviceBuffer<bf16>(size_t(P * qr));
  q = DeviceBuffer<bf16>(size_t(P * H * d));
  o = DeviceBuffer<bf16>(size_t(T * H * d));
  og = DeviceBuffer<bf16>(size_t(T * gin));
  zg = DeviceBuffer<bf16>(size_t(T * ro));
  z = DeviceBuffer<bf16>(size_t(P * G * ro));
  y = DeviceBuffer<bf16>(size_t(P * D));
  const int64_t dc = std::max(d, any_csa ? dI : 0);
  ca = DeviceBuffer<float>(size_t(T * 2 * dc));
  cg = DeviceBuffer<float>(size_t(T * 2 * dc));
  pooled = DeviceBuffer<bf16>(size_t(T * dc));
  if (any_csa) {
    qi = DeviceBuffer<bf16>(size_t(P * HI * dI));
    wi = DeviceBuffer<bf16>(size_t(T * HI));
    scores = DeviceBuffer<float>(size_t(T * std::max<int64_t>(max_entries_, 1)));
    selected = DeviceBuffer<int32_t>(size_t(T * cfg.index_topk));
  }
  indices = DeviceBuffer<int32_t>(size_t(T * max_keys_));
}

LtMatmul& AttentionWorkspace::plan(const DeviceContext& ctx, GemmKind kind, int64_t out, int64_t in, int64_t tokens) {
  auto key = std::make_tuple(int(kind), out, in, tokens);
  auto it = plans_.find(key);
  if (it == plans_.end()) it = plans_.emplace(key, std::make_unique<LtMatmul>(ctx, kind, out, in, tokens)).first;
  return *it->second;
}

namespace {

// y [P, out] = linear(x [T, in]) in official numerics: FP8 weights quantize x (1x128), dense weights
// take x as is. Up to kExactLinearMaxTokens tokens: cuda::linear (the tier's choice: exact_linear,
// bit-identical to the CPU twin, or fast_gemv); beyond, and in the fast tier above fast_gemv's range,
// cuBLASLt (FP8 block-scaled or bf16 GEMM), whose y must hold the plan's padded rows.
void run_linear(const DeviceContext& ctx, AttentionWorkspace& ws, const DevLinear& w, const bf16* x, int64_t T,
                bf16* y) {
  if (T <= kExactLinearMaxTokens && !fast_tier_gemm(ctx, T)) {
    if (w.fp8) {
      const int64_t nb = (w.in + 127) / 128;
      act_quant_rows(ctx, x, T, w.in, ws.codes.get(), ws.scales.get(), nb, 1);
      linear_fp8(ctx, ws.codes.get(), ws.scales.get(), nb, 1, w.w8, T, y);
      return;
    }
    ExactLinearParams e;
    e.tokens = T;
    e.out = int(w.out);
    e.in = int(w.in);
    e.y = y;
    e.y_stride = w.out;
    e.x = x;
    e.x_stride = w.in;
    e.w16 = w.w16.get();
    linear(ctx, e);
    return;
  }
  if (!w.fp8) {
    ws.plan(ctx, GemmKind::Bf16, w.out, w.in, T).run_bf16(ctx, x, w.w16.get(), y);
    return;
  }
  LtMatmul& mm = ws.plan(ctx, GemmKind::Fp8BlockScaled, w.out, w.in, T);
  const int64_t P = mm.padded_tokens();
  if (P > ws.max_padded_) fail("attention: ", P, " padded tokens exceed the workspace");
  act_quant_rows(ctx, x, T, w.in, ws.codes.get(), ws.scales.get(), 1, P);
  mm.run_fp8(ctx, ws.codes.get(), ws.scales.get(), w.w8, y);
}

void run_rope(const DeviceContext& ctx, bf16* x, const AttentionBatch& b, const float* inv_freq, int64_t heads,
              int64_t head_dim, int64_t rope_dim, bool inverse) {
  RopeParams p;
  p.x = x;
  p.positions = b.positions;
  p.inv_freq = inv_freq;
  p.rows = b.tokens;
  p.heads = int(heads);
  p.head_dim = int(head_dim);
  p.rope_dim = int(rope_dim);
  p.row_stride = heads * head_dim;
  p.head_stride = head_dim;
  p.inverse = inverse;
  rope(ctx, p);
}

// The compressor of compress_chunk: fp32 projections, pooling into the slot state, entry emission.
void run_compressor(const DeviceContext& ctx, const ModelConfig& cfg, AttentionWorkspace& ws,
                    const DevCompressorWeights& w, const AttentionBatch& b, const bf16* x, float* cur_a, float* cur_g,
                    float* prev_a, float* prev_g, bf16* entries, int64_t max_entries, const float* inv_freq,
                    bool indexer) {
  const int width = (w.overlap ? 2 : 1) * w.dc;
  LinearF32Params lp;
  lp.x = x;
  lp.tokens = b.tokens;
  lp.x_stride = cfg.hidden_size;
  lp.in = int(cfg.hidden_size);
  lp.out = width;
  if (b.tokens > kExactLinearMaxTokens) lp.plan = &ws.plan(ctx, GemmKind::Bf16F32Out, width, lp.in, b.tokens);
  lp.w = w.wkv.get();
  lp.y = ws.ca.get();
  linear_f32(ctx, lp);
  lp.w = w.wgate.get();
  lp.y = ws.cg.get();
  linear_f32(ctx, lp);

  CompressorPoolParams pp;
  pp.a = ws.ca.get();
  pp.g = ws.cg.get();
  pp.ape = w.ape.get();
  pp.cur_a = cur_a;
  pp.cur_g = cur_g;
  pp.prev_a = prev_a;
  pp.prev_g = prev_g;
  pp.pooled = ws.pooled.get();
  pp.positions = b.positions;
  pp.slots = b.slots;
  pp.tokens = b.tokens;
  pp.run_len = b.run_len;
  pp.ratio = w.ratio;
  pp.dc = w.dc;
  pp.overlap = w.overlap;
  compressor_pool(ctx, pp);

  CompressorEmitParams ep;
  ep.pooled = ws.pooled.get();
  ep.norm = w.norm.get();
  ep.inv_freq = inv_freq;
  ep.entries = entries;
  ep.positions = b.positions;
  ep.slots = b.slots;
  ep.tokens = b.tokens;
  ep.max_entries = max_entries;
  ep.ratio = w.ratio;
  ep.dc = w.dc;
  ep.rope_dim = int(cfg.rope_dim);
  ep.indexer = indexer;
  ep.eps = float(cfg.rms_norm_eps);
  compressor_emit(ctx, ep);
}

// index_topk: indexer queries, head weights, scores over the visible keys, top-k.
void run_indexer(const DeviceContext& ctx, const ModelConfig& cfg, AttentionWorkspace& ws, const DevIndexerWeights& w,
                 AttentionLayerState& st, const AttentionBatch& b, const bf16* x, const float* inv_freq) {
  const int64_t HI = cfg.index_n_heads, dI = cfg.index_head_dim;
  run_linear(ctx, ws, w.wq_b, ws.cq.get(), b.tokens, ws.qi.get());
  run_rope(ctx, ws.qi.get(), b, inv_freq, HI, dI, cfg.rope_dim, false);
  HadamardFp4Params hp;
  hp.x = ws.qi.get();
  hp.vectors = b.tokens * HI;
  hp.stride = dI;
  hp.n = int(dI);
  hadamard_fp4(ctx, hp);

  LinearF32Params lp;
  lp.x = x;
  lp.w = w.weights_proj.get();
  lp.y_bf16 = ws.wi.get();
  lp.tokens = b.tokens;
  lp.x_stride = cfg.hidden_size;
  lp.in = int(cfg.hidden_size);
  lp.out = int(HI);
  if (b.tokens > kExactLinearMaxTokens) lp.plan = &ws.plan(ctx, GemmKind::Bf16, HI, lp.in, b.tokens);
  linear_f32(ctx, lp);

  IndexerScoreParams sp;
  sp.q = ws.qi.get();
  sp.w = ws.wi.get();
  sp.keys = st.index_keys.get();
  sp.scores = ws.scores.get();
  sp.positions = b.positions;
  sp.slots = b.slots;
  sp.tokens = b.tokens;
  sp.max_entries = st.max_entries;
  sp.heads = int(HI);
  sp.dim = int(dI);
  sp.ratio = w.comp.ratio;
  sp.wscale = float(1.0 / std::sqrt(double(dI)) / std::sqrt(double(HI)));
  indexer_scores(ctx, sp);

  IndexerTopkParams tp;
  tp.scores = ws.scores.get();
  tp.selected = ws.selected.get();
  tp.positions = b.positions;
  tp.tokens = b.tokens;
  tp.max_entries = st.max_entries;
  tp.k = int(cfg.index_topk);
  tp.ratio = w.comp.ratio;
  indexer_topk(ctx, tp);
}

}  // namespace

void AttentionWorkspace::prepare(const DeviceContext& ctx, const ModelConfig& cfg, const DevAttentionWeights& w,
                                 int64_t tokens) {
  if (tokens <= kExactLinearMaxTokens && !fast_tier_gemm(ctx, tokens)) return;  // exact_linear needs no plans
  auto lin = [&](const DevLinear& l) {
    plan(ctx, l.fp8 ? GemmKind::Fp8BlockScaled : GemmKind::Bf16, l.out, l.in, tokens);
  };
  lin(w.wq_a);
  lin(w.wq_b);
  lin(w.wkv);
  lin(w.wo_b);
  if (w.idx) lin(w.idx->wq_b);
  plan(ctx, GemmKind::Bf16, cfg.o_lora_rank, cfg.num_heads * cfg.head_dim / cfg.o_groups, tokens);
}

void attention_forward(const DeviceContext& ctx, const ModelConfig& cfg, const DevAttentionWeights& w,
                       AttentionLayerState& st, AttentionWorkspace& ws, const AttentionBatch& b, const bf16* x,
                       bf16* out) {
  const int64_t T = b.tokens, D = cfg.hidden_size, H = cfg.num_heads, d = cfg.head_dim, rd = cfg.rope_dim;
  const int64_t G = cfg.o_groups, ro = cfg.o_lora_rank, gin = H * d / G, W = cfg.sliding_window;
  const float eps = float(cfg.rms_norm_eps);
  const AttnKind kind = w.spec.attn;
  if (T == 0) return;
  if (T > ws.max_tokens() || T > st.chunk_rows) fail("attention_forward: ", T, " tokens exceed the workspace");
  if (b.run_len <= 0 || T % b.run_len != 0) fail("attention_forward: ", T, " tokens in runs of ", b.run_len);
  if (!b.positions || !b.slots || !x || !out) fail("attention_forward: null pointer");

  // Q: wq_a, q_norm, wq_b, per-head norm, RoPE.
  run_linear(ctx, ws, w.wq_a, x, T, ws.cq.get());
  rms_norm_rows(ctx, ws.cq.get(), w.q_norm.get(), T, cfg.q_lora_rank, eps);
  run_linear(ctx, ws, w.wq_b, ws.cq.get(), T, ws.q.get());
  HeadNormParams hn;
  hn.x = ws.q.get();
  hn.rows = T;
  hn.row_stride = H * d;
  hn.heads = int(H);
  hn.dim = int(d);
  hn.eps = eps;
  head_norm_bf16(ctx, hn);
  run_rope(ctx, ws.q.get(), b, w.inv_freq.get(), H, d, rd, false);

  // KV of this call's tokens into the chunk rows: wkv, kv_norm, RoPE, FP8 snap of the non-rope dims.
  bf16* kv_chunk = st.kv.get() + st.chunk_base() * d;
  run_linear(ctx, ws, w.wkv, x, T, kv_chunk);
  rms_norm_rows(ctx, kv_chunk, w.kv_norm.get(), T, d, eps);
  run_rope(ctx, kv_chunk, b, w.inv_freq.get(), 1, d, rd, false);
  KvSnapParams ks;
  ks.x = kv_chunk;
  ks.rows = T;
  ks.row_stride = d;
  ks.nope = int(d - rd);
  fp8_kv_snap(ctx, ks);

  // Compressed entries of this call are emitted before any of its queries attend.
  if (w.comp)
    run_compressor(ctx, cfg, ws, *w.comp, b, x, st.cur_a.get(), st.cur_g.get(), st.prev_a.get(), st.prev_g.get(),
                   st.kv.get() + st.pool_base() * d, st.max_entries, w.inv_freq.get(), false);
  if (kind == AttnKind::CSA) {
    run_compressor(ctx, cfg, ws, w.idx->comp, b, x, st.icur_a.get(), st.icur_g.get(), st.iprev_a.get(),
                   st.iprev_g.get(), st.index_keys.get(), st.max_entries, w.inv_freq.get(), true);
    run_indexer(ctx, cfg, ws, *w.idx, st, b, x, w.inv_freq.get());
  }

  // Key lists, sparse attention with sinks, de-rotation; then the ring takes this call's KV.
  const int64_t max_keys = max_keys_of(cfg, w.spec, st.max_ctx);
  KeyListParams kl;
  kl.indices = ws.indices.get();
  kl.positions = b.positions;
  kl.slots = b.slots;
  kl.selected = kind == AttnKind::CSA ? ws.selected.get() : nullptr;
  kl.tokens = T;
  kl.run_len = b.run_len;
  kl.window = int(W);
  kl.max_keys = int(max_keys);
  kl.topk = int(cfg.index_topk);
  kl.ratio = kind == AttnKind::Sliding ? 0 : w.spec.ratio;
  kl.ring_base = st.ring_base();
  kl.chunk_base = st.chunk_base();
  kl.pool_base = st.pool_base();
  kl.max_entries = st.max_entries;
  build_key_list(ctx, kl);

  SparseAttentionParams ap;
  ap.q = ws.q.get();
  ap.kv = st.kv.get();
  ap.indices = ws.indices.get();
  ap.sinks = w.sink.get();
  ap.out = ws.o.get();
  ap.tokens = T;
  ap.entries = st.pool_base() + st.max_seqs * st.max_entries;
  ap.heads = int(H);
  ap.dim = int(d);
  ap.max_keys = int(max_keys);
  ap.scale = float(1.0 / std::sqrt(double(d)));
  sparse_attention(ctx, ap);
  run_rope(ctx, ws.o.get(), b, w.inv_freq.get(), H, d, rd, true);

  RingWriteParams rw;
  rw.kv = st.kv.get();
  rw.positions = b.positions;
  rw.slots = b.slots;
  rw.tokens = T;
  rw.run_len = b.run_len;
  rw.ring_base = st.ring_base();
  rw.chunk_base = st.chunk_base();
  rw.window = int(W);
  rw.dim = int(d);
  ring_write(ctx, rw);

  // Grouped output projection: heads of group g through rows g*ro.. of wo_a (bf16 GEMM), then wo_b.
  if (T <= kExactLinearMaxTokens) {
    ExactLinearParams e;  // all G groups in one launch (exact_linear's group mode)
    e.x = ws.o.get();
    e.x_stride = H * d;
    e.x_group_stride = gin;
    e.w16 = w.wo_a.get();
    e.w_expert_stride = ro * gin;
    e.y = ws.z.get();
    e.y_stride = G * ro;
    e.y_group_stride = ro;
    e.groups = int(G);
    e.tokens = T;
    e.out = int(ro);
    e.in = int(gin);
    linear(ctx, e);
    run_linear(ctx, ws, w.wo_b, ws.z.get(), T, ws.y.get());
    DSV4_CUDA_CHECK(cudaMemcpyAsync(out, ws.y.get(), size_t(T * D) * sizeof(bf16), cudaMemcpyDeviceToDevice,
                                    ctx.stream()));
    return;
  }
  LtMatmul& mm_a = ws.plan(ctx, GemmKind::Bf16, ro, gin, T);
  for (int64_t g = 0; g < G; ++g) {
    DSV4_CUDA_CHECK(cudaMemcpy2DAsync(ws.og.get(), size_t(gin) * sizeof(bf16), ws.o.get() + g * gin,
                                      size_t(H * d) * sizeof(bf16), size_t(gin) * sizeof(bf16), size_t(T),
                                      cudaMemcpyDeviceToDevice, ctx.stream()));
    mm_a.run_bf16(ctx, ws.og.get(), w.wo_a.get() + g * ro * gin, ws.zg.get());
    DSV4_CUDA_CHECK(cudaMemcpy2DAsync(ws.z.get() + g * ro, size_t(G * ro) * sizeof(bf16), ws.zg.get(),
                                      size_t(ro) * sizeof(bf16), size_t(ro) * sizeof(bf16), size_t(T),
                                      cudaMemcpyDeviceToDevice, ctx.stream()));
  }
  run_linear(ctx, ws, w.wo_b, ws.z.get(), T, ws.y.get());
  DSV4_CUDA_CHECK(cudaMemcpyAsync(out, ws.y.get(), size_t(T * D) * sizeof(bf16), cudaMemcpyDeviceToDevice,
                                  ctx.stream()));
}

}  // namespace dsv4::cuda
