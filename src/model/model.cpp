#include "model/model.h"

#include <algorithm>
#include <cstring>

#include "backend/cpu/ops.h"
#include "core/error.h"
#include "model/quantize.h"

namespace dsv4 {

Numerics parse_numerics(const std::string& s) {
  if (s == "reference") return Numerics::Reference;
  if (s == "official") return Numerics::Official;
  fail("--numerics: expected 'reference' or 'official', got '", s, "'");
}
const char* numerics_name(Numerics n) { return n == Numerics::Reference ? "reference" : "official"; }

std::unique_ptr<Model> Model::load(const std::string& dir, Numerics numerics, const LoadProgress& progress) {
  ModelConfig cfg = load_config(dir);
  auto ckpt = Checkpoint::open(dir);
  return std::make_unique<Model>(std::move(cfg), std::move(ckpt), numerics, progress);
}

Model::Model(ModelConfig cfg, std::unique_ptr<Checkpoint> ckpt, Numerics numerics, const LoadProgress& progress)
    : cfg_(std::move(cfg)), ckpt_(std::move(ckpt)), numerics_(numerics) {
  if (numerics_ == Numerics::Official) {
    // The reference's quantizers tile these widths exactly; refuse shapes they cannot handle.
    if ((cfg_.head_dim - cfg_.rope_dim) % 64 != 0)
      fail(cfg_.source, ": official numerics need head_dim - qk_rope_head_dim divisible by 64 (FP8 KV blocks), got ",
           cfg_.head_dim - cfg_.rope_dim, "; use --numerics reference");
    const bool any_csa = std::any_of(cfg_.layers.begin(), cfg_.layers.end(),
                                     [](const LayerSpec& l) { return l.attn == AttnKind::CSA; });
    if (any_csa && (cfg_.index_head_dim % 32 != 0 || (cfg_.index_head_dim & (cfg_.index_head_dim - 1)) != 0))
      fail(cfg_.source, ": official numerics need index_head_dim a power of two >= 32, got ", cfg_.index_head_dim,
           "; use --numerics reference");
  }
  views_ = bind_weights(cfg_, *ckpt_);
  w_ = to_cpu_weights(views_, ckpt_->total_bytes(), progress);
}

void Model::block(const BlockF& w, const LayerSpec& spec, LayerState& st, Tensor& X,
                  const std::vector<int32_t>& tokens, int64_t p0) const {
  const int64_t T = X.dim(0), n = cfg_.hc_mult, D = cfg_.hidden_size;
  const float eps = float(cfg_.rms_norm_eps), hc_eps = float(cfg_.hc_eps);
  const bool official = numerics_ == Numerics::Official;
  std::vector<float> pre(size_t(T * n)), post(size_t(T * n)), comb(size_t(T * n * n));

  // One sub-layer: mHC pre (coefficients + collapse), norm, f, mHC post.
  auto sublayer = [&](const HcF& hc, const Tensor& norm_w, auto&& f) {
    Tensor u({T, D});
    for (int64_t t = 0; t < T; ++t) {
      const float* Xt = X.ptr() + t * n * D;
      cpu::mhc_coeffs(Xt, n, D, hc.fn.ptr(), hc.base.ptr(), hc.scale.ptr(), eps, hc_eps, int(cfg_.hc_sinkhorn_iters),
                      &pre[size_t(t * n)], &post[size_t(t * n)], &comb[size_t(t * n * n)]);
      cpu::mhc_collapse(Xt, n, D, &pre[size_t(t * n)], u.row(t));
    }
    if (official)
      for (float& v : u.data) v = round_bf16(v);
    cpu::rms_norm(u.ptr(), T, D, norm_w.ptr(), eps, u.ptr());
    if (official)
      for (float& v : u.data) v = round_bf16(v);
    Tensor y = f(u);
    Tensor Xn({T, n, D});
    for (int64_t t = 0; t < T; ++t)
      cpu::mhc_post(X.ptr() + t * n * D, n, D, y.row(t), &post[size_t(t * n)], &comb[size_t(t * n * n)],
                    Xn.ptr() + t * n * D);
    if (official)
      for (float& v : Xn.data) v = round_bf16(v);
    X = std::move(Xn);
  };
  sublayer(w.hc_attn, w.attn_norm, [&](const Tensor& x) { return attention(w.attn, spec, st, x, p0); });
  sublayer(w.hc_ffn, w.ffn_norm, [&](const Tensor& x) { return moe(w.ffn, spec, x, tokens); });
}

Tensor Model::head_hidden(const HcF& hc, const Tensor& norm, const Tensor& X, int64_t first) const {
  const int64_t T = X.dim(0), n = cfg_.hc_mult, D = cfg_.hidden_size;
  Tensor h({T - first, D});
  std::vector<float> pre(static_cast<size_t>(n));
  for (int64_t t = first; t < T; ++t) {
    const float* Xt = X.ptr() + t * n * D;
    cpu::mhc_head_coeffs(Xt, n, D, hc.fn.ptr(), hc.base.ptr(), hc.scale.ptr(), float(cfg_.rms_norm_eps),
                         float(cfg_.hc_eps), pre.data());
    cpu::mhc_collapse(Xt, n, D, pre.data(), h.row(t - first));
  }
  const QuantSim q(numerics_);
  q.bf16(h.ptr(), h.numel());
  cpu::rms_norm(h.ptr(), h.dim(0), D, norm.ptr(), float(cfg_.rms_norm_eps), h.ptr());
  q.bf16(h.ptr(), h.numel());
  return h;
}

Tensor Model::head_logits(const HcF& hc, const Tensor& norm, const Tensor& X, bool all) const {
  const Tensor h = head_hidden(hc, norm, X, all ? 0 : X.dim(0) - 1);
  Tensor logits({h.dim(0), cfg_.vocab_size});
  cpu::matmul(h.ptr(), h.dim(0), cfg_.hidden_size, w_.head.ptr(), cfg_.vocab_size, logits.ptr());
  return logits;
}

Tensor Model::forward(SequenceState& state, const std::vector<int32_t>& tokens, const ForwardOptions& opt) const {
  const int64_t T = int64_t(tokens.size()), n = cfg_.hc_mult, D = cfg_.hidden_size;
  if (T == 0) fail("forward: empty chunk");
  for (int32_t id : tokens)
    if (id < 0 || id >= cfg_.vocab_size) fail("token id ", id, " is outside the vocabulary [0, ", cfg_.vocab_size, ")");
  const int64_t p0 = state.pos;
  Tensor X({T, n, D});
  for (int64_t t = 0; t < T; ++t)
    for (int64_t j = 0; j < n; ++j)
      std::memcpy(X.ptr() + (t * n + j) * D, w_.embed.row(tokens[size_t(t)]), size_t(D) * sizeof(float));
  if (opt.hidden) opt.hidden->push_back(X);
  for (size_t i = 0; i < w_.layers.size(); ++i) {
    block(w_.layers[i], cfg_.layers[i], state.layers[i], X, tokens, p0);
    if (opt.hidden && i + 1 < w_.layers.size()) opt.hidden->push_back(X);
  }
  if (opt.streams) *opt.streams = X;
  if (opt.hidden) opt.hidden->push_back(head_hidden(w_.hc_head, w_.norm, X, 0));  // hidden_L: after hc_head + norm
  state.pos += T;
  return head_logits(w_.hc_head, w_.norm, X, opt.all_logits);
}

Tensor Model::forward_mtp(SequenceState& state, const Tensor& streams, const std::vector<int32_t>& next_ids,
                         size_t k) const {
  const int64_t T = int64_t(next_ids.size()), n = cfg_.hc_mult, D = cfg_.hidden_size;
  if (k >= w_.mtp.size()) fail("the checkpoint has ", w_.mtp.size(), " MTP block(s), block ", k, " requested");
  if (streams.shape != Shape{T, n, D})
    fail("MTP input streams are ", shape_str(streams.shape), ", expected ", shape_str({T, n, D}));
  for (int32_t id : next_ids)
    if (id < 0 || id >= cfg_.vocab_size) fail("token id ", id, " is outside the vocabulary [0, ", cfg_.vocab_size, ")");
  const MtpF& m = w_.mtp[k];
  const QuantSim q(numerics_);
  const float eps = float(cfg_.rms_norm_eps);
  // X0[t, j] = e_proj(enorm(embed(next id))) + h_proj(hnorm(X[t, j]))
  Tensor e({T, D}), ep({T, D}), h = streams, hp({T * n, D});
  for (int64_t t = 0; t < T; ++t) std::memcpy(e.row(t), w_.embed.row(next_ids[size_t(t)]), size_t(D) * sizeof(float));
  cpu::rms_norm(e.ptr(), T, D, m.enorm.ptr(), eps, e.ptr());
  q.bf16(e.ptr(), e.numel());
  q.linear(m.e_proj, e, ep);
  h.shape = {T * n, D};
  cpu::rms_norm(h.ptr(), T * n, D, m.hnorm.ptr(), eps, h.ptr());
  q.bf16(h.ptr(), h.numel());
  q.linear(m.h_proj, h, hp);
  Tensor X({T, n, D});
  for (int64_t t = 0; t < T; ++t)
    for (int64_t j = 0; j < n; ++j)
      for (int64_t c = 0; c < D; ++c) X.ptr()[(t * n + j) * D + c] = ep.row(t)[c] + hp.row(t * n + j)[c];
  q.bf16(X.ptr(), X.numel());
  LayerSpec spec = k < cfg_.mtp_layers.size() ? cfg_.mtp_layers[k] : LayerSpec{};
  spec.route = RouteKind::TopK;  // MTP blocks never hash-route
  block(m.block, spec, state.mtp[k], X, next_ids, state.mtp_pos);
  state.mtp_pos += T;
  return head_logits(m.hc_head, m.norm, X, true);
}

}  // namespace dsv4
