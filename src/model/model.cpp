#include "model/model.h"

#include <cstring>

#include "backend/cpu/ops.h"
#include "core/error.h"

namespace dsv4 {

Numerics parse_numerics(const std::string& s) {
  if (s == "reference") return Numerics::Reference;
  if (s == "official") return Numerics::Official;
  fail("--numerics: expected 'reference' or 'official', got '", s, "'");
}
const char* numerics_name(Numerics n) { return n == Numerics::Reference ? "reference" : "official"; }

std::unique_ptr<Model> Model::load(const std::string& dir, Numerics numerics) {
  ModelConfig cfg = load_config(dir);
  auto ckpt = Checkpoint::open(dir);
  return std::make_unique<Model>(std::move(cfg), std::move(ckpt), numerics);
}

Model::Model(ModelConfig cfg, std::unique_ptr<Checkpoint> ckpt, Numerics numerics)
    : cfg_(std::move(cfg)), ckpt_(std::move(ckpt)), numerics_(numerics) {
  views_ = bind_weights(cfg_, *ckpt_);
  w_ = to_cpu_weights(views_);
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

Tensor Model::head_logits(const HcF& hc, const Tensor& norm, const Tensor& X, bool all) const {
  const int64_t T = X.dim(0), n = cfg_.hc_mult, D = cfg_.hidden_size, V = cfg_.vocab_size;
  const int64_t first = all ? 0 : T - 1, rows = T - first;
  Tensor h({rows, D});
  std::vector<float> pre(static_cast<size_t>(n));
  for (int64_t t = first; t < T; ++t) {
    const float* Xt = X.ptr() + t * n * D;
    cpu::mhc_head_coeffs(Xt, n, D, hc.fn.ptr(), hc.base.ptr(), hc.scale.ptr(), float(cfg_.rms_norm_eps),
                         float(cfg_.hc_eps), pre.data());
    cpu::mhc_collapse(Xt, n, D, pre.data(), h.row(t - first));
  }
  const bool official = numerics_ == Numerics::Official;
  if (official)
    for (float& v : h.data) v = round_bf16(v);
  cpu::rms_norm(h.ptr(), rows, D, norm.ptr(), float(cfg_.rms_norm_eps), h.ptr());
  if (official)
    for (float& v : h.data) v = round_bf16(v);
  Tensor logits({rows, V});
  cpu::matmul(h.ptr(), rows, D, w_.head.ptr(), V, logits.ptr());
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
  if (opt.hidden) {
    // hidden_L: after hc_head and the final norm
    Tensor h({T, D});
    std::vector<float> pre(static_cast<size_t>(n));
    for (int64_t t = 0; t < T; ++t) {
      const float* Xt = X.ptr() + t * n * D;
      cpu::mhc_head_coeffs(Xt, n, D, w_.hc_head.fn.ptr(), w_.hc_head.base.ptr(), w_.hc_head.scale.ptr(),
                           float(cfg_.rms_norm_eps), float(cfg_.hc_eps), pre.data());
      cpu::mhc_collapse(Xt, n, D, pre.data(), h.row(t));
    }
    cpu::rms_norm(h.ptr(), T, D, w_.norm.ptr(), float(cfg_.rms_norm_eps), h.ptr());
    opt.hidden->push_back(std::move(h));
  }
  state.pos += T;
  return head_logits(w_.hc_head, w_.norm, X, opt.all_logits);
}

}  // namespace dsv4
