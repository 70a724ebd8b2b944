// The attention ops and their state / workspace (attention_sublayer.h). The op sequence mirrors the
// CPU backend's attention step by step; each step's numerics are its kernel's.
#include "backend/cuda/attention_sublayer.h"

#include <algorithm>
#include <cmath>

#include "backend/cuda/attn_ops.h"
#include "backend/cuda/check.h"
#include "backend/cuda/fp8_dequant.h"
#include "backend/cuda/linear_choice.h"
#include "backend/cuda/linear_exact.h"
#include "backend/cuda/linear_fast.h"
#include "backend/cuda/ops.h"
#include "core/error.h"
#include "io/memory_plan.h"  // wo_a_scratch_groups

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
                                         int64_t max_ctx_, int64_t max_tokens, int64_t pool_pages_,
                                         int64_t page_tokens)
    : max_seqs(max_seqs_), max_ctx(max_ctx_), window(cfg.sliding_window), head_dim(cfg.head_dim),
      chunk_rows(round16(max_tokens)), max_entries(max_entries_of(spec, max_ctx_)),
      pool_pages(spec.attn == AttnKind::Sliding ? 0 : pool_pages_),
      per_page(spec.attn == AttnKind::Sliding ? 0 : page_tokens / spec.ratio) {
  if (max_seqs <= 0 || max_ctx <= 0 || max_tokens <= 0) fail("AttentionLayerState: empty capacity");
  if (spec.attn != AttnKind::Sliding && (page_tokens <= 0 || page_tokens % spec.ratio != 0))
    fail("AttentionLayerState: ", page_tokens, " tokens per page for compress ratio ", spec.ratio);
  kv = DeviceBuffer<bf16>(size_t(pool_base() * head_dim));
  zero(kv);
  if (spec.attn != AttnKind::Sliding) {
    entry_rec = record_geom(kv_entry_layout(cfg.head_dim, cfg.rope_dim));
    entry_records = DeviceBuffer<uint8_t>(size_t(std::max<int64_t>(pool_rows(), 1) * entry_rec.bytes));
    zero(entry_records);
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
    key_rec = record_geom(indexer_key_layout(dI));
    key_records = DeviceBuffer<uint8_t>(size_t(std::max<int64_t>(pool_rows(), 1) * key_rec.bytes));
    zero(key_records);
  }
}

std::vector<AttentionLayerState::Piece> AttentionLayerState::slot_pieces(int64_t slot) {
  if (slot < 0 || slot >= max_seqs) fail("attention state: slot ", slot, " outside [0, ", max_seqs, ")");
  std::vector<Piece> out;
  auto rows = [&](int64_t first, int64_t n) {
    if (n > 0) out.push_back({kv.get() + first * head_dim, size_t(n * head_dim) * sizeof(bf16)});
  };
  rows(ring_base() + slot * window, window);
  auto per_slot = [&](auto& b) {
    if (b.size() == 0) return;
    const size_t n = b.size() / size_t(max_seqs);
    out.push_back({b.get() + size_t(slot) * n, n * sizeof(*b.get())});
  };
  for (DeviceBuffer<float>* b : {&cur_a, &cur_g, &prev_a, &prev_g, &icur_a, &icur_g, &iprev_a, &iprev_g}) per_slot(*b);
  return out;
}

std::vector<AttentionLayerState::Piece> AttentionLayerState::page_pieces(int32_t page) {
  if (per_page == 0) return {};
  if (page < 0 || page >= pool_pages) fail("attention state: page ", page, " outside [0, ", pool_pages, ")");
  const size_t rows = size_t(page) * size_t(per_page);
  std::vector<Piece> out{{entry_records.get() + rows * size_t(entry_rec.bytes), size_t(per_page) * size_t(entry_rec.bytes)}};
  if (key_records.size() > 0)
    out.push_back({key_records.get() + rows * size_t(key_rec.bytes), size_t(per_page) * size_t(key_rec.bytes)});
  return out;
}

AttentionWorkspace::AttentionWorkspace(const ModelConfig& cfg, int64_t max_tokens, int64_t max_ctx, bool wo_a_codes)
    : max_tokens_(max_tokens), max_padded_(round16(max_tokens)) {
  if (max_tokens <= 0) fail("AttentionWorkspace: max_tokens must be positive");
  const int64_t D = cfg.hidden_size, H = cfg.num_heads, d = cfg.head_dim, qr = cfg.q_lora_rank;
  const int64_t G = cfg.o_groups, ro = cfg.o_lora_rank;
  const int64_t HI = cfg.index_n_heads, dI = cfg.index_head_dim, T = max_tokens, P = max_padded_;
  bool any_csa = false;
  std::vector<LayerSpec> specs = cfg.layers;  // the main stack and the MTP blocks the config describes
  for (size_t k = 0; k < cfg.mtp_layers.size(); ++k) specs.push_back(cfg.layer_at(cfg.num_layers + int64_t(k)));
  for (const LayerSpec& l : specs) {
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
  z = DeviceBuffer<bf16>(size_t(P * G * ro));
  y = DeviceBuffer<bf16>(size_t(P * D));
  bool any_compressed = false;
  for (const LayerSpec& l : specs) any_compressed = any_compressed || l.attn != AttnKind::Sliding;
  auto scratch = [&](CompressorScratch& c, int64_t dc) {
    c.ca = DeviceBuffer<float>(size_t(T * 2 * dc));
    c.cg = DeviceBuffer<float>(size_t(T * 2 * dc));
    c.pooled = DeviceBuffer<bf16>(size_t(T * dc));
  };
  if (any_compressed) scratch(comp[int(CompressorKind::Main)], d);
  if (any_csa) {
    scratch(comp[int(CompressorKind::Indexer)], dI);
    icodes = DeviceBuffer<uint8_t>(size_t(P * qr));
    iscales = DeviceBuffer<float>(size_t((qr + 127) / 128 * P));
    qi = DeviceBuffer<bf16>(size_t(P * HI * dI));
    wi = DeviceBuffer<bf16>(size_t(T * HI));
    scores = DeviceBuffer<float>(size_t(T * std::max<int64_t>(max_entries_, 1)));
    selected = DeviceBuffer<int32_t>(size_t(T * cfg.index_topk));
  }
  indices = DeviceBuffer<int32_t>(size_t(T * max_keys_));
  split_tickets = DeviceBuffer<int32_t>(size_t(std::min(T, kSplitAttentionMaxTokens) * H));
  zero(split_tickets);
  if (wo_a_codes) wo_a16 = DeviceBuffer<bf16>(size_t(wo_a_scratch_bytes(cfg) / sizeof(bf16)));
}

LtMatmul& AttentionWorkspace::plan(const DeviceContext& ctx, GemmKind kind, int64_t out, int64_t in, int64_t tokens,
                                   const LtGroups& groups) {
  auto key = std::make_tuple(int(kind), out, in, tokens, groups);
  auto it = plans_.find(key);
  if (it == plans_.end()) it = plans_.emplace(key, std::make_unique<LtMatmul>(ctx, kind, out, in, tokens, groups)).first;
  return *it->second;
}

// The kernel is the table's: exact_linear (bit-identical to the CPU twin) or fast_gemv, each on its own
// quantization layout, or cuBLASLt (FP8 block-scaled or bf16 GEMM), whose y must hold the plan's padded rows.
namespace {

// run_linear with x's FP8 quantization in `codes` / `scales` (ws.codes / ws.scales, or a lane's own).
void run_linear_via(const DeviceContext& ctx, AttentionWorkspace& ws, const DevLinear& w, const bf16* x, int64_t T,
                    bf16* y, uint8_t* codes, float* scales) {
  const LinearKernel k = linear_kernel(LinearSite::Projection, T, ctx.kernels());
  if (k != LinearKernel::Lt) {
    if (w.fp8) {
      const int64_t nb = (w.in + 127) / 128;
      act_quant_rows(ctx, x, T, w.in, codes, scales, nb, 1);
      run_linear_kernel(ctx, k, fp8_linear_params(codes, scales, nb, 1, w.w8, T, y));
      return;
    }
    run_linear_kernel(ctx, k, {.x = x, .x_stride = w.in, .w16 = w.w16.get(), .y = y, .y_stride = w.out, .tokens = T,
                               .out = int(w.out), .in = int(w.in)});
    return;
  }
  if (!w.fp8) {
    ws.plan(ctx, GemmKind::Bf16, w.out, w.in, T).run_bf16(ctx, x, w.w16.get(), y);
    return;
  }
  LtMatmul& mm = ws.plan(ctx, GemmKind::Fp8BlockScaled, w.out, w.in, T);
  const int64_t P = mm.padded_tokens();
  if (P > ws.max_padded_) fail("attention: ", P, " padded tokens exceed the workspace");
  act_quant_rows(ctx, x, T, w.in, codes, scales, 1, P);
  mm.run_fp8(ctx, codes, scales, w.w8, y);
}

}  // namespace

void run_linear(const DeviceContext& ctx, AttentionWorkspace& ws, const DevLinear& w, const bf16* x, int64_t T,
                bf16* y) {
  run_linear_via(ctx, ws, w, x, T, y, ws.codes.get(), ws.scales.get());
}

namespace {

// Whether the norm before w writes x's 1x128 quantization (row-major scales, nb per row) into ws.codes /
// ws.scales in its own launch: where the table picks a GEMV kernel for an FP8 w whose width is whole blocks.
bool norm_quantizes(const DeviceContext& ctx, const DevLinear& w, int64_t T) {
  return linear_kernel(LinearSite::Projection, T, ctx.kernels()) != LinearKernel::Lt && w.fp8 && w.in % 128 == 0;
}

// x [T, w.in] = rms_norm(x) in place (norm weight, eps), then, where norm_quantizes, its codes (the bits of
// rms_norm_rows then run_linear's act_quant_rows). The linear is run_normed_linear.
void run_norm(const DeviceContext& ctx, AttentionWorkspace& ws, const DevLinear& w, bf16* x, const float* norm,
              float eps, int64_t T) {
  if (!norm_quantizes(ctx, w, T)) {
    rms_norm_rows(ctx, x, norm, T, w.in, eps);
    return;
  }
  const int64_t nb = w.in / 128;
  RmsNormParams p;
  p.x = p.y = x;
  p.weight = norm;
  p.rows = T;
  p.dim = int(w.in);
  p.x_stride = p.y_stride = w.in;
  p.eps = eps;
  p.codes = ws.codes.get();
  p.scales = ws.scales.get();
  p.codes_stride = w.in;
  p.sf_row_stride = nb;
  p.sf_block_stride = 1;
  rms_norm(ctx, p);
}

// The indexer's wq_b reads the q_norm's codes of ws.cq (run_norm before the main wq_b wrote them): both FP8
// over the same width where the norm quantizes.
bool q_codes_fused(const DeviceContext& ctx, const DevAttentionWeights& w, int64_t T) {
  return w.indexer && norm_quantizes(ctx, w.wq_b, T) && norm_quantizes(ctx, w.indexer->wq_b, T) &&
         w.indexer->wq_b.in == w.wq_b.in;
}

// y = run_linear(w, x) after run_norm(w, x): from the norm's codes in ws.codes / ws.scales where it wrote
// them.
void run_normed_linear(const DeviceContext& ctx, AttentionWorkspace& ws, const DevLinear& w, const bf16* x, int64_t T,
                       bf16* y) {
  if (!norm_quantizes(ctx, w, T)) {
    run_linear(ctx, ws, w, x, T, y);
    return;
  }
  const int64_t nb = w.in / 128;
  run_linear_kernel(ctx, linear_kernel(LinearSite::Projection, T, ctx.kernels()),
                    fp8_linear_params(ws.codes.get(), ws.scales.get(), nb, 1, w.w8, T, y));
}

// run_linear of two FP8 weights on the same x (wq_a and wkv) where the table picks fast_gemv: one
// quantization of x and, where fast_gemv takes both, one launch. False (nothing run) elsewhere.
bool run_linear_pair(const DeviceContext& ctx, AttentionWorkspace& ws, const DevLinear& a, const DevLinear& b,
                     const bf16* x, int64_t T, bf16* ya, bf16* yb) {
  const LinearKernel k = linear_kernel(LinearSite::Projection, T, ctx.kernels());
  if (k != LinearKernel::FastGemv || !a.fp8 || !b.fp8 || a.in != b.in) return false;
  const int64_t nb = (a.in + 127) / 128;
  act_quant_rows(ctx, x, T, a.in, ws.codes.get(), ws.scales.get(), nb, 1);
  const ExactLinearParams calls[2] = {fp8_linear_params(ws.codes.get(), ws.scales.get(), nb, 1, a.w8, T, ya),
                                      fp8_linear_params(ws.codes.get(), ws.scales.get(), nb, 1, b.w8, T, yb)};
  if (!run_shared_input(ctx, k, calls, 2)) {
    run_linear_kernel(ctx, k, calls[0]);
    run_linear_kernel(ctx, k, calls[1]);
  }
  return true;
}

// linear_f32's contract (attn_ops.h) for the compressor and weights_proj, the kernel from the table:
// y_f32 and / or y_bf16 [T, out] = x [T, in] . w^T with fp32 sums.
void run_linear_f32(const DeviceContext& ctx, AttentionWorkspace& ws, LinearSite site, const bf16* x, int64_t x_stride,
                    const bf16* w, int64_t T, int in, int out, float* y_f32, bf16* y_bf16) {
  const LinearKernel k = linear_kernel(site, T, ctx.kernels());
  if (k == LinearKernel::Lt) {
    const GemmKind kind = y_f32 ? GemmKind::Bf16F32Out : GemmKind::Bf16;
    linear_f32(ctx, {.x = x, .w = w, .y = y_f32, .y_bf16 = y_bf16, .tokens = T, .x_stride = x_stride, .in = in,
                     .out = out, .plan = &ws.plan(ctx, kind, out, in, T)});
    return;
  }
  if (in <= 0 || in % 8 != 0 || x_stride % 8 != 0 || out <= 0)
    fail("linear_f32: in = ", in, " and the row stride must be multiples of 8");
  run_linear_kernel(ctx, k, {.x = x, .x_stride = x_stride, .w16 = w, .y = y_bf16, .y_f32 = y_f32, .y_stride = out,
                             .tokens = T, .out = out, .in = in});
}

// The compressor of compress_chunk: fp32 projections, pooling into the slot state, entry emission.
void run_compressor(const DeviceContext& ctx, const ModelConfig& cfg, AttentionWorkspace& ws,
                    const DevCompressorWeights& w, const AttentionBatch& b, const bf16* x, float* cur_a, float* cur_g,
                    float* prev_a, float* prev_g, uint8_t* records, const KvRecordGeom& kv_rec,
                    const IndexerRecordGeom& key_rec, const PagedRows& rows, const float* inv_freq, bool indexer) {
  const int width = (w.overlap ? 2 : 1) * w.dc, in = int(cfg.hidden_size);
  AttentionWorkspace::CompressorScratch& sc = ws.comp[int(indexer ? CompressorKind::Indexer : CompressorKind::Main)];
  if (size_t(b.tokens) * size_t(width) > sc.ca.size() || size_t(b.tokens) * size_t(w.dc) > sc.pooled.size())
    fail("attention: the ", indexer ? "indexer's" : "main", " compressor (", width, " columns x ", b.tokens,
         " tokens) exceeds its scratch");
  // wkv and wgate read the same x: one fast_gemv launch where the table's fast_gemv takes both.
  const LinearKernel k = linear_kernel(LinearSite::CompressorF32, b.tokens, ctx.kernels());
  const ExactLinearParams e[2] = {
      {.x = x, .x_stride = cfg.hidden_size, .w16 = w.wkv.get(), .y_f32 = sc.ca.get(), .y_stride = width,
       .tokens = b.tokens, .out = width, .in = in},
      {.x = x, .x_stride = cfg.hidden_size, .w16 = w.wgate.get(), .y_f32 = sc.cg.get(), .y_stride = width,
       .tokens = b.tokens, .out = width, .in = in}};
  if (!run_shared_input(ctx, k, e, 2)) {
    run_linear_f32(ctx, ws, LinearSite::CompressorF32, x, cfg.hidden_size, w.wkv.get(), b.tokens, in, width,
                   sc.ca.get(), nullptr);
    run_linear_f32(ctx, ws, LinearSite::CompressorF32, x, cfg.hidden_size, w.wgate.get(), b.tokens, in, width,
                   sc.cg.get(), nullptr);
  }
  compressor_pool(ctx, {.a = sc.ca.get(), .g = sc.cg.get(), .ape = w.ape.get(), .cur_a = cur_a, .cur_g = cur_g,
                        .prev_a = prev_a, .prev_g = prev_g, .pooled = sc.pooled.get(), .positions = b.positions,
                        .slots = b.slots, .tokens = b.tokens, .run_len = b.run_len, .ratio = w.ratio, .dc = w.dc,
                        .overlap = w.overlap});
  compressor_emit(ctx, {.pooled = sc.pooled.get(), .norm = w.norm.get(), .inv_freq = inv_freq, .records = records,
                        .kv_rec = kv_rec, .key_rec = key_rec,
                        .entry_rows = rows, .positions = b.positions, .slots = b.slots, .tokens = b.tokens,
                        .ratio = w.ratio, .dc = w.dc, .rope_dim = int(cfg.rope_dim), .indexer = indexer,
                        .eps = float(cfg.rms_norm_eps)});
}

// A decode step (one token per sequence) writes its KV rows into the ring in the KV finish: a ring row
// then holds a position out of the window (p - window), which no query of the step reads. Longer runs
// copy after the attention (ring_write), whose earlier queries still read the rows they overwrite.
bool ring_in_kv_finish(const AttentionBatch& b) { return b.run_len == 1; }

void check_call(const AttentionCall& a) {
  const int64_t T = a.b.tokens;
  if (T > a.ws.max_tokens() || T > a.st.chunk_rows) fail("attention: ", T, " tokens exceed the workspace");
  if (a.b.run_len <= 0 || T % a.b.run_len != 0) fail("attention: ", T, " tokens in runs of ", a.b.run_len);
  if (!a.b.positions || !a.b.slots) fail("attention: null pointer");
}

// The grouped wo_a's cuBLASLt plan: `count` products [T, gin] x [ro, gin]^T in one launch (all G groups, or
// the groups of one widening of the fast tier's codes), reading the column slices of o ([T, H*d]) and
// writing those of z ([P, G*ro]) in place.
LtMatmul& wo_a_plan(const DeviceContext& ctx, AttentionWorkspace& ws, const ModelConfig& cfg, int64_t T,
                    int64_t count) {
  const int64_t G = cfg.o_groups, ro = cfg.o_lora_rank, gin = cfg.num_heads * cfg.head_dim / G;
  return ws.plan(ctx, GemmKind::Bf16, ro, gin, T,
                 {.count = count, .x_ld = G * gin, .x_offset = gin, .w_offset = ro * gin, .y_ld = G * ro, .y_offset = ro});
}
}  // namespace

void AttentionWorkspace::prepare(const DeviceContext& ctx, const ModelConfig& cfg, const DevAttentionWeights& w,
                                 int64_t tokens) {
  const KernelTier tier = ctx.kernels();
  auto lt = [&](LinearSite s) { return linear_kernel(s, tokens, tier) == LinearKernel::Lt; };
  if (lt(LinearSite::Projection)) {
    auto lin = [&](const DevLinear& l) {
      plan(ctx, l.fp8 ? GemmKind::Fp8BlockScaled : GemmKind::Bf16, l.out, l.in, tokens);
    };
    lin(w.wq_a);
    lin(w.wq_b);
    lin(w.wkv);
    lin(w.wo_b);
    if (w.indexer) lin(w.indexer->wq_b);
  }
  if (lt(LinearSite::GroupedWoA)) wo_a_plan(ctx, *this, cfg, tokens, w.wo_a8.codes.get() ? wo_a_scratch_groups(cfg) : cfg.o_groups);
  if (lt(LinearSite::CompressorF32)) {
    if (w.compressor)
      plan(ctx, GemmKind::Bf16F32Out, (w.compressor->overlap ? 2 : 1) * w.compressor->dc, cfg.hidden_size, tokens);
    if (w.indexer) plan(ctx, GemmKind::Bf16F32Out, 2 * w.indexer->compressor.dc, cfg.hidden_size, tokens);
  }
  if (lt(LinearSite::WeightsProj) && w.indexer) plan(ctx, GemmKind::Bf16, cfg.index_n_heads, cfg.hidden_size, tokens);
}

void attn_q_latent(const DeviceContext& ctx, const AttentionCall& a, const bf16* x) {
  const DevAttentionWeights& w = a.w;
  AttentionWorkspace& ws = a.ws;
  const int64_t T = a.b.tokens;
  check_call(a);
  if (!x) fail("attention: null pointer");
  // wq_a and wkv (one launch where run_linear_pair takes them), then q_norm (and its codes for wq_b: the
  // last writer of ws.codes until attn_out).
  bf16* kv_chunk = a.st.kv.get() + a.st.chunk_base() * a.cfg.head_dim;
  if (!run_linear_pair(ctx, ws, w.wq_a, w.wkv, x, T, ws.cq.get(), kv_chunk)) {
    run_linear(ctx, ws, w.wq_a, x, T, ws.cq.get());
    run_linear(ctx, ws, w.wkv, x, T, kv_chunk);
  }
  run_norm(ctx, ws, w.wq_b, ws.cq.get(), w.q_norm.get(), float(a.cfg.rms_norm_eps), T);
}

void attn_q_heads(const DeviceContext& ctx, const AttentionCall& a) {
  const ModelConfig& cfg = a.cfg;
  const DevAttentionWeights& w = a.w;
  AttentionWorkspace& ws = a.ws;
  const AttentionBatch& b = a.b;
  const int64_t T = b.tokens, H = cfg.num_heads, d = cfg.head_dim, rd = cfg.rope_dim;
  const float eps = float(cfg.rms_norm_eps);
  check_call(a);

  // Q: wq_b, per-head norm, RoPE.
  run_normed_linear(ctx, ws, w.wq_b, ws.cq.get(), T, ws.q.get());
  head_norm_bf16(ctx, {.x = ws.q.get(), .rows = T, .row_stride = H * d, .heads = int(H), .dim = int(d), .eps = eps,
                       .positions = b.positions, .inv_freq = w.inv_freq.get(), .rope_dim = int(rd)});  // and RoPE

  // KV of this call's tokens in the chunk rows (attn_q_latent's wkv): kv_norm, RoPE, FP8 snap of the
  // non-rope dims.
  bf16* kv_chunk = a.st.kv.get() + a.st.chunk_base() * d;
  RmsNormParams kv{.x = kv_chunk, .weight = w.kv_norm.get(), .y = kv_chunk, .rows = T, .dim = int(d), .x_stride = d,
                   .y_stride = d, .eps = eps};
  kv.positions = b.positions;  // and RoPE, and the FP8 snap of the non-rope dims, in the same launch
  kv.inv_freq = w.inv_freq.get();
  kv.rope_dim = int(rd);
  if (ring_in_kv_finish(b)) {  // and ring_write's copy
    kv.ring = a.st.kv.get() + a.st.ring_base() * d;
    kv.slots = b.slots;
    kv.window = int(cfg.sliding_window);
  }
  rms_norm(ctx, kv);
}

void attn_qkv(const DeviceContext& ctx, const AttentionCall& a, const bf16* x) {
  attn_q_latent(ctx, a, x);
  attn_q_heads(ctx, a);
}

void attn_compress(const DeviceContext& ctx, const AttentionCall& a, const bf16* x, CompressorKind kind) {
  check_call(a);
  AttentionLayerState& st = a.st;
  const DevAttentionWeights& w = a.w;
  if (kind == CompressorKind::Main) {
    if (!w.compressor) fail("attention: a sliding layer has no compressor");
    run_compressor(ctx, a.cfg, a.ws, *w.compressor, a.b, x, st.cur_a.get(), st.cur_g.get(), st.prev_a.get(),
                   st.prev_g.get(), st.entry_records.get(), st.entry_rec, {}, st.pages, w.inv_freq.get(), false);
    return;
  }
  if (!w.indexer) fail("attention: only CSA layers have an indexer");
  run_compressor(ctx, a.cfg, a.ws, w.indexer->compressor, a.b, x, st.icur_a.get(), st.icur_g.get(), st.iprev_a.get(),
                 st.iprev_g.get(), st.key_records.get(), {}, st.key_rec, st.pages, w.inv_freq.get(), true);
}

// Indexer queries, head weights, scores over the visible keys, top-k.
void attn_index_topk(const DeviceContext& ctx, const AttentionCall& a, const bf16* x, const StreamMark* q_latent) {
  check_call(a);
  const ModelConfig& cfg = a.cfg;
  AttentionWorkspace& ws = a.ws;
  const AttentionBatch& b = a.b;
  if (!a.w.indexer) fail("attention: only CSA layers have an indexer");
  const DevIndexerWeights& w = *a.w.indexer;
  const int64_t HI = cfg.index_n_heads, dI = cfg.index_head_dim;
  // Head weights first (they need x only), then the queries from ws.cq once q_latent says it is there.
  run_linear_f32(ctx, ws, LinearSite::WeightsProj, x, cfg.hidden_size, w.weights_proj.get(), b.tokens,
                 int(cfg.hidden_size), int(HI), nullptr, ws.wi.get());
  if (q_latent) ctx.wait(*q_latent);
  if (q_codes_fused(ctx, a.w, b.tokens))  // the q_norm's codes of ws.cq: only read here and by wq_b
    run_normed_linear(ctx, ws, w.wq_b, ws.cq.get(), b.tokens, ws.qi.get());
  else
    run_linear_via(ctx, ws, w.wq_b, ws.cq.get(), b.tokens, ws.qi.get(), ws.icodes.get(), ws.iscales.get());
  hadamard_fp4(ctx, {.x = ws.qi.get(), .vectors = b.tokens * HI, .stride = dI, .n = int(dI), .positions = b.positions,
                     .inv_freq = a.w.inv_freq.get(), .rope_dim = int(cfg.rope_dim), .per_row = int(HI)});  // RoPE first
  indexer_scores(ctx, {.q = ws.qi.get(), .w = ws.wi.get(), .keys = a.st.key_records.get(), .key_rec = a.st.key_rec,
                       .key_rows = a.st.pages,
                       .scores = ws.scores.get(),
                       .positions = b.positions, .slots = b.slots, .tokens = b.tokens,
                       .max_entries = a.st.max_entries, .run_len = b.run_len, .heads = int(HI), .dim = int(dI), .ratio = w.compressor.ratio,
                       .wscale = float(1.0 / std::sqrt(double(dI)) / std::sqrt(double(HI)))});
  indexer_topk(ctx, {.scores = ws.scores.get(), .selected = ws.selected.get(), .positions = b.positions,
                     .tokens = b.tokens, .max_entries = a.st.max_entries, .k = int(cfg.index_topk),
                     .ratio = w.compressor.ratio});
}

void attn_attend(const DeviceContext& ctx, const AttentionCall& a) {
  check_call(a);
  const ModelConfig& cfg = a.cfg;
  const DevAttentionWeights& w = a.w;
  AttentionLayerState& st = a.st;
  AttentionWorkspace& ws = a.ws;
  const AttentionBatch& b = a.b;
  const int64_t T = b.tokens, H = cfg.num_heads, d = cfg.head_dim, W = cfg.sliding_window;
  const AttnKind kind = w.spec.attn;
  const int64_t max_keys = max_keys_of(cfg, w.spec, st.max_ctx);
  build_key_list(ctx, {.indices = ws.indices.get(), .positions = b.positions, .slots = b.slots,
                       .selected = kind == AttnKind::CSA ? ws.selected.get() : nullptr, .tokens = T,
                       .run_len = b.run_len, .window = int(W), .max_keys = int(max_keys),
                       .topk = int(cfg.index_topk), .ratio = kind == AttnKind::Sliding ? 0 : w.spec.ratio,
                       .ring_base = st.ring_base(), .chunk_base = st.chunk_base(), .pool_base = st.pool_base(),
                       .max_entries = st.max_entries, .entry_rows = st.pages, .pool_rows = st.pool_rows()});
  sparse_attention(ctx, {.q = ws.q.get(), .kv = st.kv.get(), .indices = ws.indices.get(),
                         .records = st.entry_records.get(), .record_base = st.pool_base(), .rec = st.entry_rec,
                         .sinks = w.attn_sink.get(), .out = ws.o.get(), .tokens = T, .entries = st.pool_base() + st.pool_rows(),
                         .heads = int(H), .dim = int(d), .max_keys = int(max_keys),
                         .scale = float(1.0 / std::sqrt(double(d))), .rope_positions = b.positions,
                         .rope_inv_freq = w.inv_freq.get(), .rope_dim = int(cfg.rope_dim),  // and the inverse RoPE
                         .tickets = T <= kSplitAttentionMaxTokens ? ws.split_tickets.get() : nullptr});
  if (!ring_in_kv_finish(b))
    ring_write(ctx, {.kv = st.kv.get(), .positions = b.positions, .slots = b.slots, .tokens = T,
                     .run_len = b.run_len, .ring_base = st.ring_base(), .chunk_base = st.chunk_base(),
                     .window = int(W), .dim = int(d)});
}

// Grouped output projection: heads of group g through rows g*ro.. of wo_a (bf16 GEMM, or fast_gemv on the
// FP8 codes the fast tier holds), then wo_b.
void attn_out(const DeviceContext& ctx, const AttentionCall& a, bf16* out) {
  check_call(a);
  const ModelConfig& cfg = a.cfg;
  const DevAttentionWeights& w = a.w;
  AttentionWorkspace& ws = a.ws;
  const int64_t T = a.b.tokens, D = cfg.hidden_size, H = cfg.num_heads, d = cfg.head_dim;
  const int64_t G = cfg.o_groups, ro = cfg.o_lora_rank, gin = H * d / G;
  if (!out) fail("attention: null pointer");
  const bool codes = w.wo_a8.codes.get() != nullptr;
  const LinearKernel k = linear_kernel(LinearSite::GroupedWoA, T, ctx.kernels());
  if (k != LinearKernel::Lt) {
    // All G groups in one launch (exact_linear's group mode; fast_gemv's projections).
    ExactLinearParams e{.x = ws.o.get(), .x_stride = H * d, .w16 = w.wo_a.get(), .w_expert_stride = ro * gin,
                        .groups = int(G), .x_group_stride = gin, .y_group_stride = ro, .y = ws.z.get(),
                        .y_stride = G * ro, .tokens = T, .out = int(ro), .in = int(gin)};
    if (codes) {
      if (k != LinearKernel::FastGemv) fail("attention: wo_a's FP8 codes outside the fast tier");
      e.w16 = nullptr;
      e.w8 = w.wo_a8.codes.get();
      e.w_scales = w.wo_a8.scales.get();
      e.w_scale_ld = w.wo_a8.scale_ld;
      e.ws_expert_stride = ro / 128 * w.wo_a8.scale_ld;
    }
    run_linear_kernel(ctx, k, e);
  } else if (!codes) {
    // The G groups as one strided-batch product: group g reads its column slice of o, writes its of z.
    wo_a_plan(ctx, ws, cfg, T, G).run_bf16(ctx, ws.o.get(), w.wo_a.get(), ws.z.get());
  } else {
    // The codes widened to bf16 a few groups at a time (rows that stay in L2), each widening's groups as
    // one strided batch.
    const int64_t n = wo_a_scratch_groups(cfg);
    if (!ws.wo_a16.get()) fail("attention: wo_a's FP8 codes without the workspace's bf16 rows");
    LtMatmul& plan = wo_a_plan(ctx, ws, cfg, T, n);
    for (int64_t g = 0; g < G; g += n) {
      dequantize_fp8_weight(ctx, w.wo_a8, ws.wo_a16.get(), g * ro, n * ro);
      plan.run_bf16(ctx, ws.o.get() + g * gin, ws.wo_a16.get(), ws.z.get() + g * ro);
    }
  }
  // wo_b straight into out where its kernel writes T rows; cuBLASLt writes its plan's padded rows into ws.y.
  if (linear_kernel(LinearSite::Projection, T, ctx.kernels()) != LinearKernel::Lt) {
    run_linear(ctx, ws, w.wo_b, ws.z.get(), T, out);
    return;
  }
  run_linear(ctx, ws, w.wo_b, ws.z.get(), T, ws.y.get());
  DSV4_CUDA_CHECK(cudaMemcpyAsync(out, ws.y.get(), size_t(T * D) * sizeof(bf16), cudaMemcpyDeviceToDevice,
                                  ctx.stream()));
}

}  // namespace dsv4::cuda
