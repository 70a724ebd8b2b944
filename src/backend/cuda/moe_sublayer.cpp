// The GPU MoE sub-layer (contracts in moe_sublayer.h).
#include "backend/cuda/moe_sublayer.h"

#include <algorithm>
#include <span>
#include <vector>

#include "backend/cuda/attn_ops.h"
#include "backend/cuda/fp4_gemv.h"
#include "backend/cuda/fp4_grouped_decode.h"
#include "backend/cuda/fp4_grouped_mma.h"
#include "backend/cuda/fp4_tiled.h"
#include "backend/cuda/linear_choice.h"
#include "backend/cuda/linear_exact.h"
#include "backend/cuda/linear_fast.h"
#include "backend/cuda/moe_ops.h"
#include "backend/cuda/ops.h"
#include "core/dtype.h"
#include "core/error.h"
#include "backend/cuda/device_weights.h"
#include "backend/cuda/moe_prefill.h"

namespace dsv4::cuda {
namespace {

constexpr int64_t kMaxSelections = 65535;  // fp4_gemv's grid.y limit per launch

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
  if (w.format != WeightFormat::FP4)
    fail(w.name, ": ", weight_format_name(w.format), " beside FP4 routed experts: the GPU needs one format per layer's routed experts");
  if (w.out != rows || w.in != K) fail(w.name, ": shape [", w.out, ", ", w.in, "], expected [", rows, ", ", K, "]");
  if (int64_t(w.weight.nbytes) != rows * K / 2 || int64_t(w.scale.nbytes) != rows * K / 32)
    fail(w.name, ": unexpected FP4 byte sizes");
  pack_fp4_tiled(w.weight.data, rows, K, packed_dst);
  std::copy_n(w.scale.data, rows * K / 32, scale_dst);
}

}  // namespace

// ---- MoE weights.
DevMoeWeights upload_moe_weights(const DeviceContext& ctx, const MoeWeights& w, const ModelConfig& cfg,
                                 const LayerSpec& spec, ExpertRange experts) {
  (void)ctx;
  DevMoeWeights d;
  d.E = cfg.n_routed_experts;
  d.first_expert = experts.first;
  d.held = experts.count(d.E);
  if (d.first_expert < 0 || d.held < 1 || d.first_expert + d.held > d.E)
    fail("GPU MoE: expert range [", experts.first, ", ", experts.first + d.held, ") outside the layer's ", d.E, " experts");
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

  // The routed stacks hold the range's experts only, indexed from 0 (expert first_expert + i at i).
  const int64_t E = d.held, D = d.D, I = d.I, e0 = d.first_expert;
  const std::span<const ExpertWeights> held(w.experts.data() + e0, size_t(E));
  const WeightFormat routed = held.front().w1.format;
  d.dense_experts = routed == WeightFormat::Dense;
  if (routed == WeightFormat::FP8 || routed == WeightFormat::NVFP4) {
    std::vector<std::vector<const LinearWeight*>> p13, p2;
    for (const ExpertWeights& x : held) {
      p13.push_back({&x.w1, &x.w3});
      p2.push_back({&x.w2});
    }
    const bool fast = stacked_fast_layout(ctx.kernels());  // the tier's layout
    d.w13_x = upload_expert_stack(p13, I, D, fast);
    d.w2_x = upload_expert_stack(p2, D, I, fast);
  } else if (d.dense_experts) {
    std::vector<uint16_t> w13, w2;
    w13.reserve(size_t(E * 2 * I * D));
    w2.reserve(size_t(E * D * I));
    for (int64_t e = 0; e < E; ++e) {
      const ExpertWeights& x = held[size_t(e)];
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
      const ExpertWeights& x = held[size_t(e)];
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
    : MoeWorkspace(ctx, {.D = cfg.hidden_size, .I = cfg.moe_inter_dim, .E = cfg.n_routed_experts,
                         .k = cfg.experts_per_tok}, max_tokens) {}

MoeWorkspace::MoeWorkspace(const DeviceContext& ctx, const MoeShape& shape, int64_t max_tokens)
    : max_tokens_(max_tokens), D(shape.D), I(shape.I), E(shape.E), k(shape.k) {
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
  router_tickets = DeviceBuffer<int32_t>(T);
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
  zeroed(router_tickets);
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

LtMatmul& MoeWorkspace::router_plan(const DeviceContext& ctx, int64_t T) {
  auto it = router_plans_.find(T);
  if (it != router_plans_.end()) return *it->second;
  auto p = std::make_unique<LtMatmul>(ctx, GemmKind::Bf16F32Out, E, D, T);
  return *router_plans_.emplace(T, std::move(p)).first->second;
}

namespace {
// Whether T tokens' router logits run on cuBLASLt (the table's choice, where its alignment allows).
bool router_on_lt(const DeviceContext& ctx, const MoeWorkspace& ws, int64_t T) {
  return linear_kernel(LinearSite::Router, T, ctx.kernels()) == LinearKernel::Lt && ws.D % 16 == 0;
}
}  // namespace

void MoeWorkspace::prepare(const DeviceContext& ctx, int64_t T) {
  if (linear_kernel(LinearSite::SharedExpert, T, ctx.kernels()) == LinearKernel::Lt) plans(ctx, T);
  if (router_on_lt(ctx, *this, T)) router_plan(ctx, T);
}

// ---- The ops.
namespace {

// A workspace for T rows of the layer's D, I and the given experts and picks per row: the layer's E and k
// (the router, the shared expert, one rank's whole MoE) or the held experts and 1 (received entries).
void check_workspace(const DevMoeWeights& w, const MoeWorkspace& ws, int64_t T, int64_t E, int64_t k) {
  if (T > ws.max_tokens()) fail("moe: ", T, " rows, the workspace holds ", ws.max_tokens());
  if (ws.D != w.D || ws.I != w.I || ws.E != E || ws.k != k)
    fail("moe: workspace of ", ws.E, " experts x ", ws.k, " picks, the call needs ", E, " x ", k);
}
void check_call(const DevMoeWeights& w, const MoeWorkspace& ws, int64_t T) { check_workspace(w, ws, T, w.E, w.k); }

}  // namespace

namespace {

// Whether a call's begin quantizes x (FP8 / FP4 routed experts, an FP8 shared expert) and the rows of the
// block-major scales it writes (cuBLASLt's padding where the shared expert runs there, else T).
bool quantizes_x(const DevMoeWeights& w, bool routed, bool shared) {
  return (routed && !w.dense_experts) || (shared && w.has_shared && !w.shared_dense);
}
bool shared_on_lt(const DeviceContext& ctx, const DevMoeWeights& w, int64_t T, bool shared) {
  return shared && w.has_shared && !w.shared_dense &&
         linear_kernel(LinearSite::SharedExpert, T, ctx.kernels()) == LinearKernel::Lt;
}
int64_t code_rows(const DeviceContext& ctx, const DevMoeWeights& w, MoeWorkspace& ws, int64_t T, bool shared) {
  return shared_on_lt(ctx, w, T, shared) ? ws.plans(ctx, T).up->padded_tokens() : T;
}

}  // namespace

void moe_route(const DeviceContext& ctx, const DevMoeWeights& w, MoeWorkspace& ws, const bf16* x,
               const int32_t* token_ids, int64_t T) {
  if (T == 0) return;
  check_call(w, ws, T);
  RouterParams p{.x = x, .gate = w.gate.get(), .bias = w.bias.get(),
                 .tid2eid = w.route == RouteKind::Hash ? w.tid2eid.get() : nullptr, .token_ids = token_ids,
                 .scores = ws.scores.get(), .ids = ws.ids.get(), .weights = ws.weights.get(), .bad = ws.bad.get(),
                 .T = T, .vocab = w.vocab, .E = int(w.E), .D = int(w.D), .k = int(w.k),
                 .norm_topk_prob = w.norm_topk_prob, .scaling = w.routed_scaling};
  ws.route_codes = {};
  if (router_on_lt(ctx, ws, T)) {  // the logits' GEMM, then the selection
    ws.router_plan(ctx, T).run_bf16_f32(ctx, x, w.gate.get(), ws.scores.get());
    p.logits_given = true;
    moe_router(ctx, p);
    return;
  }
  if (T > kRouterOneLaunchMaxTokens || w.E % 8 != 0) {  // two launches; begin quantizes x
    moe_router(ctx, p);
    return;
  }
  p.tickets = ws.router_tickets.get();
  if (quantizes_x(w, true, true)) {  // x's codes for the experts' begin, in the router's launch
    const int64_t P = code_rows(ctx, w, ws, T, true);
    p.codes = ws.xq.get();
    p.scales = ws.xs.get();
    p.sf_row_stride = 1;
    p.sf_block_stride = P;
    ws.route_codes = {.x = x, .T = T, .P = P};
  }
  moe_router(ctx, p);
}

namespace {

// Shared state of one MoE call's passes: the tier's kernel choices and the FP8 rows of x.
struct MoeCall {
  const DeviceContext& ctx;
  const DevMoeWeights& w;
  MoeWorkspace& ws;
  const bf16* x = nullptr;  // [T, D]
  int64_t T = 0;
  int64_t P = 0;            // rows of the block-major xs (cuBLASLt's padding of the shared expert)
  MoeWorkspace::SharedPlans* plans = nullptr;

  // A dense (bf16) linear at the Dense site (one token per expert selection when expert_ids is given).
  void dense(const bf16* xin, int64_t rows, int64_t row_div, const bf16* wt, const int32_t* ids, int64_t out,
             int64_t K, bf16* yout) const {
    run_linear_kernel(ctx, linear_kernel(LinearSite::Dense, T, ctx.kernels()),
                      {.x = xin, .x_stride = K, .x_row_div = row_div, .w16 = wt, .expert_ids = ids,
                       .w_expert_stride = out * K, .y = yout, .y_stride = out, .tokens = rows, .out = int(out),
                       .in = int(K)});
  }
};

// x -> e4m3 with block-major scales (b * P + t) where the routed or the shared expert reads FP8; the
// shared expert's cuBLASLt plans where the table picks them (`shared`: this call runs the shared expert).
// x's codes come from moe_route's launch where it wrote them for this x and layout (ws.route_codes).
MoeCall begin_call(const DeviceContext& ctx, const DevMoeWeights& w, MoeWorkspace& ws, const bf16* x, int64_t T,
                   bool routed, bool shared) {
  MoeCall c{.ctx = ctx, .w = w, .ws = ws, .x = x, .T = T, .P = T};
  if (shared_on_lt(ctx, w, T, shared)) {
    c.plans = &ws.plans(ctx, T);
    c.P = c.plans->up->padded_tokens();  // code_rows(), from the plans already fetched
  }
  const MoeWorkspace::RoutedCodes& rc = ws.route_codes;
  const bool have = rc.x == x && rc.T == T && rc.P == c.P;
  ws.route_codes = {};
  if (quantizes_x(w, routed, shared) && !have) act_quant_rows(ctx, x, T, w.D, ws.xq.get(), ws.xs.get(), 1, c.P);
  return c;
}

// The routed experts of c.T rows with ws.k picks each (ws.ids: held experts, 0 .. w.held - 1; ws.weights):
// the weighted outputs, in entry order (entry_row null) or in plan order.
GroupedRouted routed_experts(const MoeCall& c) {
  const DeviceContext& ctx = c.ctx;
  const DevMoeWeights& w = c.w;
  MoeWorkspace& ws = c.ws;
  const int64_t T = c.T, P = c.P, D = w.D, I = w.I, k = ws.k, E = ws.E, Tk = T * k;
  if (w.dense_experts && Tk > 65535) fail("moe: ", Tk, " dense-expert selections exceed one launch");
  const KernelTier tier = ctx.kernels();
  const bool stacked = w.w13_x.present();  // FP8 / NVFP4 routed experts (moe_expert_stack.h)
  const RoutedKernel routed =
      stacked ? stacked_routed_kernel(T, tier) : routed_kernel(T, ws.grouped_prefill, tier, ws.expert_tiles_from);
  const bool decode_kernel = routed == RoutedKernel::DecodeMma || routed == RoutedKernel::DecodeSelections;
  if (stacked && decode_kernel != w.w13_x.fast_layout)
    fail("moe: routed experts uploaded for the other kernel tier (the layout follows the tier at load)");

  // Large FP4 calls: the grouped tensor-core pass (moe_prefill.h) instead of the GEMVs below.
  if (!w.dense_experts && routed == RoutedKernel::Grouped)
    return moe_routed_grouped(ctx, w, ws, ws.xq.get(), ws.xs.get(), P, ws.ids.get(), ws.weights.get(), T);

  // Routed experts: one GEMV selection per (token, pick), in launches of at most 65535 selections.
  auto gemv = [&](const DeviceBuffer<uint8_t>& wp, const DeviceBuffer<uint8_t>& wsc, const uint8_t* xc, const float* xsc,
                  int64_t rows, int64_t K, bf16* out) {
    for (int64_t s0 = 0; s0 < Tk; s0 += kMaxSelections) {
      fp4_gemv(ctx, {.w_packed = wp.get(), .tiled = true, .w_scales = wsc.get(), .expert_ids = ws.ids.get() + s0,
                     .x_codes = xc + s0 * K, .x_scales = xsc + s0 * (K / 128), .y = out + s0 * rows,
                     .selections = int(std::min(kMaxSelections, Tk - s0)), .tokens = 1, .rows = rows, .K = K,
                     .x_sel_stride = K, .xs_sel_stride = K / 128, .xs_blk_stride = 1, .y_sel_stride = rows});
    }
  };
  // Expert tiles: one fp4_gemv selection per (expert, up to kMoeExpertTileRows plan rows).
  auto tile_gemv = [&](const DeviceBuffer<uint8_t>& wp, const DeviceBuffer<uint8_t>& wsc, const uint8_t* xc,
                       const float* xsc, int64_t rows, int64_t K, bf16* out) {
    fp4_gemv(ctx, {.w_packed = wp.get(), .tiled = true, .w_scales = wsc.get(), .x_codes = xc, .x_scales = xsc,
                   .y = out, .selections = int(fp4_grouped_max_tiles(Tk, int(E), kMoeExpertTileRows)),
                   .tokens = kMoeExpertTileRows, .rows = rows, .K = K, .x_tok_stride = K, .xs_tok_stride = K / 128,
                   .xs_blk_stride = 1, .y_tok_stride = rows, .tiles = ws.tiles.get(), .offsets = ws.plan.get() + E});
  };
  // The fast tier's decode-batch grouped MMA (fp4_grouped_decode.h): w1|w3 reads the token rows of xq
  // through the plan (no gather), w2 the plan-ordered hq.
  // `wt`: the weight fields (format, w, scales, out, K): FP4 experts' tiled stacks or fast_stack_params.
  auto decode_mma = [&](const uint8_t* xq, const float* xs, int64_t xs_row, int64_t xs_blk, const int32_t* rows,
                        int picks, Fp4GroupedDecodeParams wt, const MoePlanRefs& plan, int tile_rows, bf16* yout) {
    wt.xq = xq;
    wt.xs = xs;
    wt.xs_row_stride = xs_row;
    wt.xs_block_stride = xs_blk;
    wt.rows = rows;
    wt.picks = picks;
    wt.counts = plan.counts;
    wt.offsets = plan.offsets;
    wt.tiles = ws.tiles.get();
    wt.y = yout;
    wt.n = Tk;
    wt.E = int(E);
    wt.tile_rows = tile_rows;
    fp4_grouped_decode(ctx, wt);
  };
  auto fp4_weights = [](const DeviceBuffer<uint8_t>& wp, const DeviceBuffer<uint8_t>& wsc, int64_t out, int64_t K) {
    return Fp4GroupedDecodeParams{.w = wp.get(), .w_scales = wsc.get(), .out = out, .K = K};
  };
  // FP8 / NVFP4 routed experts: selection t reads activation row t / row_div (codes [rows, K], scales of
  // (row r, block b) at r * xs_row + b * xs_blk), in launches of whole tokens up to 65535 selections.
  auto stack_linear = [&](const ExpertStack& st, const uint8_t* xc, const float* xsc, int64_t xs_row, int64_t xs_blk,
                          int64_t row_div, bf16* out) {
    const int64_t chunk = kMaxSelections / row_div * row_div;
    for (int64_t s0 = 0; s0 < Tk; s0 += chunk) {
      ExactLinearParams e = expert_stack_params(st, ws.ids.get() + s0);
      e.x_codes = xc + (s0 / row_div) * st.K;
      e.x_scales = xsc + (s0 / row_div) * xs_row;
      e.x_stride = st.K;
      e.xs_row_stride = xs_row;
      e.xs_block_stride = xs_blk;
      e.x_row_div = row_div;
      e.y = out + s0 * st.rows;
      e.y_stride = st.rows;
      e.tokens = std::min(chunk, Tk - s0);
      exact_linear(ctx, e);
    }
  };
  // The fast tier's small steps: fp4_grouped_decode's selection mode, in entry order (no plan, no gather).
  if (!w.dense_experts && routed == RoutedKernel::DecodeSelections) {
    auto selections = [&](const uint8_t* xq, const float* xs, int64_t xs_row, int64_t xs_blk, int picks,
                          Fp4GroupedDecodeParams wt, bf16* yout) {
      wt.xq = xq;
      wt.xs = xs;
      wt.xs_row_stride = xs_row;
      wt.xs_block_stride = xs_blk;
      wt.picks = picks;
      wt.expert_ids = ws.ids.get();
      wt.y = yout;
      wt.n = Tk;
      wt.E = int(E);
      wt.tile_rows = 8;
      fp4_grouped_decode(ctx, wt);
    };
    selections(ws.xq.get(), ws.xs.get(), 1, P, int(k),
               stacked ? fast_stack_params(w.w13_x) : fp4_weights(w.w13, w.w13_scales, 2 * I, D), ws.y13.get());
    swiglu_gate_up_quant(ctx, ws.y13.get(), ws.weights.get(), Tk, I, w.swiglu_limit, ws.hq.get(), ws.hs.get());
    selections(ws.hq.get(), ws.hs.get(), I / 128, 1, 1,
               stacked ? fast_stack_params(w.w2_x) : fp4_weights(w.w2, w.w2_scales, D, I), ws.y2.get());
    return {.y2 = ws.y2.get(), .entry_row = nullptr};
  }
  if (!w.dense_experts && (routed == RoutedKernel::DecodeMma || routed == RoutedKernel::Tiles)) {
    const bool mma = routed == RoutedKernel::DecodeMma;
    const int tile_rows = !mma ? kMoeExpertTileRows : T >= kDecodeMma16RowsFrom ? 16 : 8;
    const MoePlanRefs plan = moe_plan_tiles(ctx, ws, ws.ids.get(), ws.weights.get(), Tk, int(E), tile_rows);
    if (mma) {
      decode_mma(ws.xq.get(), ws.xs.get(), 1, P, plan.rows, int(k),
                 stacked ? fast_stack_params(w.w13_x) : fp4_weights(w.w13, w.w13_scales, 2 * I, D), plan, tile_rows,
                 ws.y13.get());
    } else {  // x rows in plan order
      moe_gather(ctx, {.xq = ws.xq.get(), .xs = ws.xs.get(), .sel_xq = ws.sel_xq.get(), .sel_xs = ws.sel_xs.get(),
                       .rows = plan.rows, .T = T, .P = P, .k = int(k), .D = int(D)});
      tile_gemv(w.w13, w.w13_scales, ws.sel_xq.get(), ws.sel_xs.get(), 2 * I, D, ws.y13.get());
    }
    swiglu_gate_up_quant(ctx, ws.y13.get(), ws.w_rows.get(), Tk, I, w.swiglu_limit, ws.hq.get(), ws.hs.get());
    if (mma)
      decode_mma(ws.hq.get(), ws.hs.get(), I / 128, 1, nullptr, 1,
                 stacked ? fast_stack_params(w.w2_x) : fp4_weights(w.w2, w.w2_scales, D, I), plan, tile_rows,
                 ws.y2.get());
    else
      tile_gemv(w.w2, w.w2_scales, ws.hq.get(), ws.hs.get(), D, I, ws.y2.get());
    return {.y2 = ws.y2.get(), .entry_row = ws.entry_row.get()};
  }

  // The per-selection path: gate | up, SwiGLU, down, in entry order.
  if (stacked) {
    stack_linear(w.w13_x, ws.xq.get(), ws.xs.get(), 1, P, k, ws.y13.get());
  } else if (w.dense_experts) {
    c.dense(c.x, Tk, k, w.w13_16.get(), ws.ids.get(), 2 * I, D, ws.y13.get());
  } else {
    moe_gather(ctx, {.xq = ws.xq.get(), .xs = ws.xs.get(), .sel_xq = ws.sel_xq.get(), .sel_xs = ws.sel_xs.get(),
                     .T = T, .P = P, .k = int(k), .D = int(D)});
    gemv(w.w13, w.w13_scales, ws.sel_xq.get(), ws.sel_xs.get(), 2 * I, D, ws.y13.get());
  }
  if (w.dense_experts) {
    swiglu_gate_up(ctx, ws.y13.get(), ws.weights.get(), ws.h.get(), Tk, I, w.swiglu_limit);
    c.dense(ws.h.get(), Tk, 1, w.w2_16.get(), ws.ids.get(), D, I, ws.y2.get());
  } else {
    swiglu_gate_up_quant(ctx, ws.y13.get(), ws.weights.get(), Tk, I, w.swiglu_limit, ws.hq.get(), ws.hs.get());
    if (stacked) stack_linear(w.w2_x, ws.hq.get(), ws.hs.get(), I / 128, 1, 1, ws.y2.get());
    else gemv(w.w2, w.w2_scales, ws.hq.get(), ws.hs.get(), D, I, ws.y2.get());
  }
  return {.y2 = ws.y2.get(), .entry_row = nullptr};
}

// The shared expert of x [T, D] into ws.ys (null without one).
const bf16* shared_expert(const MoeCall& c) {
  const DeviceContext& ctx = c.ctx;
  const DevMoeWeights& w = c.w;
  MoeWorkspace& ws = c.ws;
  if (!w.has_shared) return nullptr;
  const int64_t T = c.T, P = c.P, D = w.D, I = w.I;
  const LinearKernel shared_kernel = linear_kernel(LinearSite::SharedExpert, T, ctx.kernels());
  // The shared expert's FP8 linears below cuBLASLt's range (exact_linear or fast_gemv).
  auto shared_fp8_linear = [&](const uint8_t* codes, const float* scales, int64_t P_in, const Fp8Weight& wt,
                               bf16* yout) {
    run_linear_kernel(ctx, shared_kernel, fp8_linear_params(codes, scales, 1, P_in, wt, T, yout));
  };
  // Gate and up.
  if (w.shared_dense) {
    c.dense(c.x, T, 1, w.shared16_w1.get(), nullptr, I, D, ws.sg.get());
    c.dense(c.x, T, 1, w.shared16_w3.get(), nullptr, I, D, ws.su.get());
  } else if (c.plans) {
    c.plans->up->run_fp8(ctx, ws.xq.get(), ws.xs.get(), w.shared_w1, ws.sg.get());
    c.plans->up->run_fp8(ctx, ws.xq.get(), ws.xs.get(), w.shared_w3, ws.su.get());
  } else {
    const ExactLinearParams calls[2] = {fp8_linear_params(ws.xq.get(), ws.xs.get(), 1, P, w.shared_w1, T, ws.sg.get()),
                                        fp8_linear_params(ws.xq.get(), ws.xs.get(), 1, P, w.shared_w3, T, ws.su.get())};
    if (!run_shared_input(ctx, shared_kernel, calls, 2)) {  // else one launch each
      shared_fp8_linear(ws.xq.get(), ws.xs.get(), P, w.shared_w1, ws.sg.get());
      shared_fp8_linear(ws.xq.get(), ws.xs.get(), P, w.shared_w3, ws.su.get());
    }
  }
  const SwigluParams sw{.g = ws.sg.get(), .u = ws.su.get(), .h = ws.sh.get(), .rows = T, .g_stride = I, .u_stride = I,
                        .I = int(I), .limit = w.swiglu_limit};
  // Down (FP8: the SwiGLU and its quantization in one launch).
  if (w.shared_dense) {
    swiglu(ctx, sw);
    c.dense(ws.sh.get(), T, 1, w.shared16_w2.get(), nullptr, D, I, ws.ys.get());
  } else {
    const int64_t P2 = c.plans ? c.plans->down->padded_tokens() : T;
    swiglu_quant(ctx, {.s = sw, .codes = ws.shq.get(), .scales = ws.shs.get(), .sf_row_stride = 1, .sf_block_stride = P2});
    if (c.plans) c.plans->down->run_fp8(ctx, ws.shq.get(), ws.shs.get(), w.shared_w2, ws.ys.get());
    else shared_fp8_linear(ws.shq.get(), ws.shs.get(), P2, w.shared_w2, ws.ys.get());
  }
  return ws.ys.get();
}

}  // namespace

void moe_experts(const DeviceContext& ctx, const DevMoeWeights& w, MoeWorkspace& ws, const bf16* x, int64_t T,
                 bf16* y, const DeviceContext* shared_lane) {
  if (T == 0) return;
  check_call(w, ws, T);
  if (w.held != w.E) fail("moe: the layer holds ", w.held, " of its ", w.E, " experts (expert parallel: moe_ranks.h)");
  const MoeCall c = begin_call(ctx, w, ws, x, T, true, true);
  const bf16* shared = nullptr;
  const bool beside = shared_lane && w.has_shared;
  if (beside) {  // the shared expert on the lane, after x's codes; its buffers are its own (ws.sg .. ws.ys)
    ctx.fork(*shared_lane);
    MoeCall on_lane{.ctx = *shared_lane, .w = w, .ws = ws, .x = x, .T = T, .P = c.P, .plans = c.plans};
    shared = shared_expert(on_lane);
  }
  const GroupedRouted r = routed_experts(c);
  if (beside) ctx.join(*shared_lane);
  else shared = shared_expert(c);
  moe_combine(ctx, {.y2 = r.y2, .ids = ws.ids.get(), .entry_row = r.entry_row, .shared = shared, .y = y, .T = T,
                    .k = int(w.k), .D = int(w.D)});
}

void moe_routed_entries(const DeviceContext& ctx, const DevMoeWeights& w, MoeWorkspace& ws, const bf16* x, int64_t n,
                        bf16* y) {
  if (n == 0) return;
  check_workspace(w, ws, n, w.held, 1);
  const MoeCall c = begin_call(ctx, w, ws, x, n, true, false);
  const GroupedRouted r = routed_experts(c);
  moe_combine(ctx, {.y2 = r.y2, .ids = ws.ids.get(), .entry_row = r.entry_row, .y = y, .T = n, .k = 1, .D = int(w.D)});
}

const bf16* moe_shared_expert(const DeviceContext& ctx, const DevMoeWeights& w, MoeWorkspace& ws, const bf16* x,
                              int64_t T) {
  if (T == 0 || !w.has_shared) return nullptr;
  check_call(w, ws, T);
  return shared_expert(begin_call(ctx, w, ws, x, T, false, true));
}

}  // namespace dsv4::cuda
