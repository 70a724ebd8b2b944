// The GPU MoE, embedding and head (contracts in ffn_layer.h).
#include "model_cuda/ffn_layer.h"

#include <algorithm>
#include <vector>

#include "backend/cuda/attn_ops.h"
#include "backend/cuda/embed_head.h"
#include "backend/cuda/fp4_gemv.h"
#include "backend/cuda/fp4_grouped_mma.h"
#include "backend/cuda/fp4_tiled.h"
#include "backend/cuda/linear_exact.h"
#include "backend/cuda/linear_fast.h"
#include "backend/cuda/moe_ops.h"
#include "backend/cuda/ops.h"
#include "core/dtype.h"
#include "core/error.h"
#include "model_cuda/moe_prefill.h"

namespace dsv4::cuda {
namespace {

constexpr int64_t kMaxSelections = 65535;  // fp4_gemv's grid.y limit per launch

DeviceBuffer<bf16> upload_bf16(const TensorView& v) {
  DeviceBuffer<bf16> d(size_t(v.numel()));
  std::vector<uint16_t> h(size_t(v.numel()));
  if (v.dtype == DType::BF16) {
    std::copy_n(reinterpret_cast<const uint16_t*>(v.data), h.size(), h.data());
  } else {
    const Tensor t = to_tensor(v);
    for (size_t i = 0; i < h.size(); ++i) h[i] = f32_to_bf16(t.data[i]);
  }
  if (!h.empty()) DSV4_CUDA_CHECK(cudaMemcpy(d.get(), h.data(), h.size() * 2, cudaMemcpyHostToDevice));
  return d;
}

DeviceBuffer<float> upload_f32(const TensorView& v) { return DeviceBuffer<float>(to_tensor(v).data); }

// Appends a dense weight's bf16 bits (checking its shape) to a host staging vector.
void stage_dense(const LinearWeight& w, int64_t rows, int64_t K, std::vector<uint16_t>& dst) {
  if (w.format != WeightFormat::Dense) fail(w.name, ": expected a dense weight, got ", weight_format_name(w.format));
  if (w.out != rows || w.in != K) fail(w.name, ": shape [", w.out, ", ", w.in, "], expected [", rows, ", ", K, "]");
  if (w.weight.dtype == DType::BF16) {
    const uint16_t* b = reinterpret_cast<const uint16_t*>(w.weight.data);
    dst.insert(dst.end(), b, b + rows * K);
  } else {
    const Tensor t = to_tensor(w.weight);
    for (float v : t.data) dst.push_back(f32_to_bf16(v));
  }
}

DeviceBuffer<bf16> upload_bits(const std::vector<uint16_t>& h) {
  DeviceBuffer<bf16> d(h.size());
  if (!h.empty()) DSV4_CUDA_CHECK(cudaMemcpy(d.get(), h.data(), h.size() * 2, cudaMemcpyHostToDevice));
  return d;
}

// Writes an FP4 weight (checkpoint layout [rows, K/2]) to packed_dst in the tiled layout, and its E8M0
// scales [rows, K/32] to scale_dst, after checking format and shape.
void stage_fp4(const LinearWeight& w, int64_t rows, int64_t K, uint8_t* packed_dst, uint8_t* scale_dst) {
  if (w.format != WeightFormat::FP4) fail(w.name, ": the GPU MoE needs FP4 routed experts, got ", weight_format_name(w.format));
  if (w.out != rows || w.in != K) fail(w.name, ": shape [", w.out, ", ", w.in, "], expected [", rows, ", ", K, "]");
  if (int64_t(w.weight.nbytes) != rows * K / 2 || int64_t(w.scale.nbytes) != rows * K / 32)
    fail(w.name, ": unexpected FP4 byte sizes");
  pack_fp4_tiled(w.weight.data, rows, K, packed_dst);
  std::copy_n(w.scale.data, rows * K / 32, scale_dst);
}

}  // namespace

// ---- MoE weights.
DevMoeWeights upload_moe_weights(const DeviceContext& ctx, const MoeWeights& w, const ModelConfig& cfg,
                                 const LayerSpec& spec) {
  (void)ctx;
  DevMoeWeights d;
  d.E = cfg.n_routed_experts;
  d.k = cfg.experts_per_tok;
  d.D = cfg.hidden_size;
  d.I = cfg.moe_inter_dim;
  d.vocab = cfg.vocab_size;
  d.route = spec.route;
  d.swiglu_limit = float(cfg.swiglu_limit);
  d.routed_scaling = float(cfg.routed_scaling_factor);
  d.norm_topk_prob = cfg.norm_topk_prob;
  if (d.D % 128 != 0 || d.I % 128 != 0) fail("GPU MoE: hidden ", d.D, " and expert width ", d.I, " must be multiples of 128");
  if (int64_t(w.experts.size()) != d.E) fail("GPU MoE: ", w.experts.size(), " experts bound, config says ", d.E);

  d.gate = upload_bf16(w.gate.weight);
  if (spec.route == RouteKind::Hash) {
    const Tensor t = to_tensor(w.tid2eid);
    std::vector<int32_t> ids(t.data.size());
    for (size_t i = 0; i < ids.size(); ++i) ids[i] = int32_t(t.data[i]);
    if (int64_t(ids.size()) != d.vocab * d.k) fail("GPU MoE: tid2eid has ", ids.size(), " entries, expected V * k");
    d.tid2eid = DeviceBuffer<int32_t>(ids);
  } else {
    d.bias = upload_f32(w.bias);
  }

  const int64_t E = d.E, D = d.D, I = d.I;
  d.dense_experts = E > 0 && w.experts[0].w1.format == WeightFormat::Dense;
  if (d.dense_experts) {
    std::vector<uint16_t> w13, w2;
    w13.reserve(size_t(E * 2 * I * D));
    w2.reserve(size_t(E * D * I));
    for (int64_t e = 0; e < E; ++e) {
      const ExpertWeights& x = w.experts[size_t(e)];
      stage_dense(x.w1, I, D, w13);
      stage_dense(x.w3, I, D, w13);
      stage_dense(x.w2, D, I, w2);
    }
    d.w13_16 = upload_bits(w13);
    d.w2_16 = upload_bits(w2);
  } else {
    std::vector<uint8_t> w13(size_t(E * 2 * I * D / 2)), s13(size_t(E * 2 * I * D / 32));
    std::vector<uint8_t> w2(size_t(E * D * I / 2)), s2(size_t(E * D * I / 32));
    for (int64_t e = 0; e < E; ++e) {
      const ExpertWeights& x = w.experts[size_t(e)];
      uint8_t* p13 = w13.data() + e * 2 * I * D / 2;
      uint8_t* q13 = s13.data() + e * 2 * I * D / 32;
      // w1 and w3 are packed as one [2I, D] matrix: the tiled layout tiles 16 rows, and I % 16 == 0, so
      // packing the halves separately gives the same bytes as packing the stack.
      stage_fp4(x.w1, I, D, p13, q13);
      stage_fp4(x.w3, I, D, p13 + I * D / 2, q13 + I * D / 32);
      stage_fp4(x.w2, D, I, w2.data() + e * D * I / 2, s2.data() + e * D * I / 32);
    }
    d.w13 = DeviceBuffer<uint8_t>(w13);
    d.w13_scales = DeviceBuffer<uint8_t>(s13);
    d.w2 = DeviceBuffer<uint8_t>(w2);
    d.w2_scales = DeviceBuffer<uint8_t>(s2);
  }

  d.has_shared = cfg.n_shared_experts > 0 && w.shared.w1.present();
  d.shared_dense = d.has_shared && w.shared.w1.format == WeightFormat::Dense;
  if (d.shared_dense) {
    std::vector<uint16_t> h1, h3, h2;
    stage_dense(w.shared.w1, I, D, h1);
    stage_dense(w.shared.w3, I, D, h3);
    stage_dense(w.shared.w2, D, I, h2);
    d.shared16_w1 = upload_bits(h1);
    d.shared16_w3 = upload_bits(h3);
    d.shared16_w2 = upload_bits(h2);
  } else if (d.has_shared) {
    for (const LinearWeight* l : {&w.shared.w1, &w.shared.w2, &w.shared.w3})
      if (l->format != WeightFormat::FP8) fail(l->name, ": the GPU MoE needs an FP8 shared expert, got ", weight_format_name(l->format));
    d.shared_w1 = upload_fp8_weight(w.shared.w1.weight, w.shared.w1.scale);
    d.shared_w3 = upload_fp8_weight(w.shared.w3.weight, w.shared.w3.scale);
    d.shared_w2 = upload_fp8_weight(w.shared.w2.weight, w.shared.w2.scale);
  }
  return d;
}

// ---- Workspace.
struct MoeWorkspace::SharedPlans {
  std::unique_ptr<LtMatmul> up;    // [I, D]: w1 and w3
  std::unique_ptr<LtMatmul> down;  // [D, I]: w2
};

MoeWorkspace::MoeWorkspace(const DeviceContext& ctx, const ModelConfig& cfg, int64_t max_tokens)
    : max_tokens_(max_tokens), D(cfg.hidden_size), I(cfg.moe_inter_dim), E(cfg.n_routed_experts),
      k(cfg.experts_per_tok) {
  (void)ctx;
  if (max_tokens <= 0) fail("MoeWorkspace: max_tokens must be positive");
  P = (max_tokens + 15) / 16 * 16;
  const size_t T = size_t(max_tokens), Tk = T * size_t(k), Pz = size_t(P);
  auto zeroed = [](auto& b) { b.fill_bytes(0); };
  scores = DeviceBuffer<float>(T * size_t(E));
  ids = DeviceBuffer<int32_t>(Tk);
  weights = DeviceBuffer<float>(Tk);
  xq = DeviceBuffer<uint8_t>(Pz * size_t(D));
  xs = DeviceBuffer<float>(Pz * size_t(D / 128));
  sel_xq = DeviceBuffer<uint8_t>(Tk * size_t(D));
  sel_xs = DeviceBuffer<float>(Tk * size_t(D / 128));
  y13 = DeviceBuffer<bf16>(Tk * size_t(2 * I));
  h = DeviceBuffer<bf16>(Tk * size_t(I));
  hq = DeviceBuffer<uint8_t>(Tk * size_t(I));
  hs = DeviceBuffer<float>(Tk * size_t(I / 128));
  y2 = DeviceBuffer<bf16>(Tk * size_t(D));
  sg = DeviceBuffer<bf16>(Pz * size_t(I));
  su = DeviceBuffer<bf16>(Pz * size_t(I));
  sh = DeviceBuffer<bf16>(Pz * size_t(I));
  shq = DeviceBuffer<uint8_t>(Pz * size_t(I));
  shs = DeviceBuffer<float>(Pz * size_t(I / 128));
  ys = DeviceBuffer<bf16>(Pz * size_t(D));
  bad = DeviceBuffer<int32_t>(1);
  plan = DeviceBuffer<int32_t>(size_t(moe_plan_ints(int64_t(Tk), int(E))));
  entry_row = DeviceBuffer<int32_t>(Tk);
  plan_scratch = DeviceBuffer<int32_t>(size_t(moe_plan_scratch_ints(int64_t(Tk), int(E))));
  tiles = DeviceBuffer<int32_t>(size_t(fp4_grouped_tile_ints(int64_t(Tk), int(E), kMoeExpertTileRows)));
  w_rows = DeviceBuffer<float>(Tk);
  // cuBLASLt reads the padded rows past T: keep them finite.
  zeroed(xq);
  zeroed(xs);
  zeroed(shq);
  zeroed(shs);
  zeroed(bad);
}

MoeWorkspace::~MoeWorkspace() = default;

MoeWorkspace::SharedPlans& MoeWorkspace::plans(const DeviceContext& ctx, int64_t T) {
  auto it = plans_.find(T);
  if (it != plans_.end()) return *it->second;
  auto p = std::make_unique<SharedPlans>();
  p->up = std::make_unique<LtMatmul>(ctx, GemmKind::Fp8BlockScaled, I, D, T);
  p->down = std::make_unique<LtMatmul>(ctx, GemmKind::Fp8BlockScaled, D, I, T);
  if (p->up->padded_tokens() > P || p->down->padded_tokens() > P)
    fail("MoeWorkspace: cuBLASLt pads ", T, " tokens to more than the ", P, " rows reserved");
  return *plans_.emplace(T, std::move(p)).first->second;
}

void MoeWorkspace::prepare(const DeviceContext& ctx, int64_t T) {
  if (T > kExactLinearMaxTokens || fast_tier_gemm(ctx, T)) plans(ctx, T);
}

// ---- Forward.
void moe_forward(const DeviceContext& ctx, const DevMoeWeights& w, MoeWorkspace& ws, const bf16* x,
                 const int32_t* token_ids, int64_t T, bf16* y) {
  if (T == 0) return;
  if (T > ws.max_tokens()) fail("moe_forward: ", T, " tokens, the workspace holds ", ws.max_tokens());
  if (ws.D != w.D || ws.I != w.I || ws.E != w.E || ws.k != w.k) fail("moe_forward: workspace shapes differ from the layer's");
  const int64_t D = w.D, I = w.I, k = w.k, Tk = T * k;
  const bool exact = T <= kExactLinearMaxTokens, shared_fp8 = w.has_shared && !w.shared_dense;
  if (w.dense_experts && Tk > 65535) fail("moe_forward: ", Tk, " dense-expert selections exceed one launch");
  // The shared expert on cuBLASLt: above the exact range, and in the fast tier above fast_gemv's.
  MoeWorkspace::SharedPlans* plans = shared_fp8 && (!exact || fast_tier_gemm(ctx, T)) ? &ws.plans(ctx, T) : nullptr;
  const int64_t P = plans ? plans->up->padded_tokens() : T;

  RouterParams r;
  r.x = x;
  r.gate = w.gate.get();
  r.bias = w.bias.get();
  r.tid2eid = w.route == RouteKind::Hash ? w.tid2eid.get() : nullptr;
  r.token_ids = token_ids;
  r.scores = ws.scores.get();
  r.ids = ws.ids.get();
  r.weights = ws.weights.get();
  r.bad = ws.bad.get();
  r.T = T;
  r.vocab = w.vocab;
  r.E = int(w.E);
  r.D = int(D);
  r.k = int(k);
  r.norm_topk_prob = w.norm_topk_prob;
  r.scaling = w.routed_scaling;
  moe_router(ctx, r);

  if (!w.dense_experts || shared_fp8)  // x -> e4m3, scales block-major (b * P + t)
    act_quant_rows(ctx, x, T, D, ws.xq.get(), ws.xs.get(), 1, P);

  // Large FP4 calls: the grouped tensor-core pass (moe_prefill.h) instead of the GEMVs below.
  GroupedRouted grouped;
  if (!exact && !w.dense_experts && ws.grouped_prefill)
    grouped = moe_routed_grouped(ctx, w, ws, ws.xq.get(), ws.xs.get(), P, ws.ids.get(), ws.weights.get(), T);

  // exact_linear of a bf16 / FP8 input against a bf16 / FP8 weight (one token per expert selection
  // when expert_ids is given).
  auto exact_dense = [&](const bf16* xin, int64_t rows, int64_t row_div, const bf16* wt, const int32_t* ids,
                         int64_t out, int64_t K, bf16* yout) {
    ExactLinearParams e;
    e.x = xin;
    e.x_stride = K;
    e.x_row_div = row_div;
    e.w16 = wt;
    e.expert_ids = ids;
    e.w_expert_stride = out * K;
    e.y = yout;
    e.y_stride = out;
    e.tokens = rows;
    e.out = int(out);
    e.in = int(K);
    linear(ctx, e);
  };
  // Routed experts: one GEMV selection per (token, pick), in launches of at most 65535 selections.
  auto gemv = [&](const DeviceBuffer<uint8_t>& wp, const DeviceBuffer<uint8_t>& wsc, const uint8_t* xc, const float* xsc,
                  int64_t rows, int64_t K, bf16* out) {
    for (int64_t s0 = 0; s0 < Tk; s0 += kMaxSelections) {
      Fp4GemvParams f;
      f.w_packed = wp.get();
      f.tiled = true;
      f.w_scales = wsc.get();
      f.expert_ids = ws.ids.get() + s0;
      f.x_codes = xc + s0 * K;
      f.x_scales = xsc + s0 * (K / 128);
      f.y = out + s0 * rows;
      f.selections = int(std::min(kMaxSelections, Tk - s0));
      f.tokens = 1;
      f.rows = rows;
      f.K = K;
      f.x_sel_stride = K;
      f.xs_sel_stride = K / 128;
      f.xs_blk_stride = 1;
      f.y_sel_stride = rows;
      fp4_gemv(ctx, f);
    }
  };
  // Expert tiles: one fp4_gemv selection per (expert, up to kMoeExpertTileRows plan rows).
  auto tile_gemv = [&](const DeviceBuffer<uint8_t>& wp, const DeviceBuffer<uint8_t>& wsc, const uint8_t* xc,
                       const float* xsc, int64_t rows, int64_t K, bf16* out) {
    Fp4GemvParams f;
    f.w_packed = wp.get();
    f.tiled = true;
    f.w_scales = wsc.get();
    f.tiles = ws.tiles.get();
    f.offsets = ws.plan.get() + w.E;
    f.x_codes = xc;
    f.x_scales = xsc;
    f.y = out;
    f.selections = int(fp4_grouped_max_tiles(Tk, int(w.E), kMoeExpertTileRows));
    f.tokens = kMoeExpertTileRows;
    f.rows = rows;
    f.K = K;
    f.x_tok_stride = K;
    f.xs_tok_stride = K / 128;
    f.xs_blk_stride = 1;
    f.y_tok_stride = rows;
    fp4_gemv(ctx, f);
  };
  const bool expert_tiles = exact && !w.dense_experts && T >= ws.expert_tiles_from;
  if (grouped.y2) {
    // done above
  } else if (expert_tiles) {
    const MoePlanRefs plan = moe_plan_tiles(ctx, ws, ws.ids.get(), ws.weights.get(), Tk, int(w.E), kMoeExpertTileRows);
    MoeGatherParams g;  // x rows in plan order
    g.xq = ws.xq.get();
    g.xs = ws.xs.get();
    g.sel_xq = ws.sel_xq.get();
    g.sel_xs = ws.sel_xs.get();
    g.rows = plan.rows;
    g.T = T;
    g.P = P;
    g.k = int(k);
    g.D = int(D);
    moe_gather(ctx, g);
    tile_gemv(w.w13, w.w13_scales, ws.sel_xq.get(), ws.sel_xs.get(), 2 * I, D, ws.y13.get());
    swiglu_gate_up(ctx, ws.y13.get(), ws.w_rows.get(), ws.h.get(), Tk, I, w.swiglu_limit);
    act_quant_rows(ctx, ws.h.get(), Tk, I, ws.hq.get(), ws.hs.get(), I / 128, 1);
    tile_gemv(w.w2, w.w2_scales, ws.hq.get(), ws.hs.get(), D, I, ws.y2.get());
    grouped.y2 = ws.y2.get();
    grouped.entry_row = ws.entry_row.get();
  } else if (w.dense_experts) {
    exact_dense(x, Tk, k, w.w13_16.get(), ws.ids.get(), 2 * I, D, ws.y13.get());
  } else {
    MoeGatherParams g;
    g.xq = ws.xq.get();
    g.xs = ws.xs.get();
    g.sel_xq = ws.sel_xq.get();
    g.sel_xs = ws.sel_xs.get();
    g.T = T;
    g.P = P;
    g.k = int(k);
    g.D = int(D);
    moe_gather(ctx, g);
    gemv(w.w13, w.w13_scales, ws.sel_xq.get(), ws.sel_xs.get(), 2 * I, D, ws.y13.get());
  }

  if (!grouped.y2) {  // SwiGLU and the down projection of the per-selection path
    swiglu_gate_up(ctx, ws.y13.get(), ws.weights.get(), ws.h.get(), Tk, I, w.swiglu_limit);

    if (w.dense_experts) {
      exact_dense(ws.h.get(), Tk, 1, w.w2_16.get(), ws.ids.get(), D, I, ws.y2.get());
    } else {
      act_quant_rows(ctx, ws.h.get(), Tk, I, ws.hq.get(), ws.hs.get(), I / 128, 1);
      gemv(w.w2, w.w2_scales, ws.hq.get(), ws.hs.get(), D, I, ws.y2.get());
    }
  }

  if (w.has_shared) {
    // Gate and up.
    if (w.shared_dense) {
      exact_dense(x, T, 1, w.shared16_w1.get(), nullptr, I, D, ws.sg.get());
      exact_dense(x, T, 1, w.shared16_w3.get(), nullptr, I, D, ws.su.get());
    } else if (plans) {
      plans->up->run_fp8(ctx, ws.xq.get(), ws.xs.get(), w.shared_w1, ws.sg.get());
      plans->up->run_fp8(ctx, ws.xq.get(), ws.xs.get(), w.shared_w3, ws.su.get());
    } else {
      linear_fp8(ctx, ws.xq.get(), ws.xs.get(), 1, P, w.shared_w1, T, ws.sg.get());
      linear_fp8(ctx, ws.xq.get(), ws.xs.get(), 1, P, w.shared_w3, T, ws.su.get());
    }
    SwigluParams ss;
    ss.g = ws.sg.get();
    ss.u = ws.su.get();
    ss.g_stride = ss.u_stride = I;
    ss.h = ws.sh.get();
    ss.rows = T;
    ss.I = int(I);
    ss.limit = w.swiglu_limit;
    swiglu(ctx, ss);
    // Down.
    if (w.shared_dense) {
      exact_dense(ws.sh.get(), T, 1, w.shared16_w2.get(), nullptr, D, I, ws.ys.get());
    } else {
      const int64_t P2 = plans ? plans->down->padded_tokens() : T;
      act_quant_rows(ctx, ws.sh.get(), T, I, ws.shq.get(), ws.shs.get(), 1, P2);
      if (plans) plans->down->run_fp8(ctx, ws.shq.get(), ws.shs.get(), w.shared_w2, ws.ys.get());
      else linear_fp8(ctx, ws.shq.get(), ws.shs.get(), 1, P2, w.shared_w2, T, ws.ys.get());
    }
  }

  MoeCombineParams c;
  c.y2 = grouped.y2 ? grouped.y2 : ws.y2.get();
  c.entry_row = grouped.entry_row;
  c.ids = ws.ids.get();
  c.shared = w.has_shared ? ws.ys.get() : nullptr;
  c.y = y;
  c.T = T;
  c.k = int(k);
  c.D = int(D);
  moe_combine(ctx, c);
}

// ---- Embedding.
DevEmbedWeights upload_embed_weights(const DeviceContext& ctx, const Weights& w, const ModelConfig& cfg) {
  (void)ctx;
  DevEmbedWeights d;
  d.vocab = cfg.vocab_size;
  d.D = cfg.hidden_size;
  if (w.embed.numel() != d.vocab * d.D) fail("GPU embedding: table of ", w.embed.numel(), " values, expected V * D");
  d.embed = upload_bf16(w.embed);
  return d;
}

void embed_forward(const DeviceContext& ctx, const DevEmbedWeights& w, const int32_t* token_ids, int64_t T, int n,
                   bf16* X, int32_t* bad_id) {
  EmbedParams p;
  p.ids = token_ids;
  p.table = w.embed.get();
  p.X = X;
  p.bad = bad_id;
  p.T = T;
  p.vocab = w.vocab;
  p.n = n;
  p.D = int(w.D);
  embed_gather(ctx, p);
}

// ---- Head.
DevHeadWeights upload_head_weights(const DeviceContext& ctx, const HcWeights& hc, const TensorView& norm,
                                   const LinearWeight& head, const ModelConfig& cfg) {
  (void)ctx;
  DevHeadWeights d;
  d.vocab = cfg.vocab_size;
  d.D = cfg.hidden_size;
  d.n = int(cfg.hc_mult);
  d.eps = float(cfg.rms_norm_eps);
  d.hc_eps = float(cfg.hc_eps);
  if (head.format != WeightFormat::Dense) fail(head.name, ": the GPU head needs a dense (bf16) weight");
  d.hc_fn = upload_f32(hc.fn);
  d.hc_base = upload_f32(hc.base);
  d.hc_scale = upload_f32(hc.scale);
  d.norm = upload_f32(norm);
  d.head = upload_bf16(head.weight);
  return d;
}

void head_hidden_forward(const DeviceContext& ctx, const DevHeadWeights& w, const bf16* X, int64_t T, bf16* h) {
  HcHeadParams c;
  c.X = X;
  c.fn = w.hc_fn.get();
  c.base = w.hc_base.get();
  c.scale = w.hc_scale.get();
  c.u = h;
  c.T = T;
  c.n = w.n;
  c.D = int(w.D);
  c.norm_eps = w.eps;
  c.hc_eps = w.hc_eps;
  hc_head_collapse(ctx, c);
  rms_norm_rows(ctx, h, w.norm.get(), T, w.D, w.eps);
}

void head_forward(const DeviceContext& ctx, const DevHeadWeights& w, const bf16* X, int64_t T, bf16* h,
                  float* logits, LtMatmul* plan) {
  head_hidden_forward(ctx, w, X, T, h);
  LinearF32Params m;
  m.x = h;
  m.x_stride = w.D;
  m.w = w.head.get();
  m.y = logits;
  m.tokens = T;
  m.out = int(w.vocab);
  m.in = int(w.D);
  m.plan = plan;
  linear_f32(ctx, m);
}

}  // namespace dsv4::cuda
