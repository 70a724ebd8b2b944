#include "io/weights.h"

#include <cmath>
#include <map>
#include <set>

#include "core/error.h"
#include "io/names.h"

namespace dsv4 {

const char* weight_format_name(WeightFormat f) {
  switch (f) {
    case WeightFormat::Dense: return "dense";
    case WeightFormat::FP8: return "fp8-e4m3 128x128";
    case WeightFormat::FP4: return "fp4-e2m1 1x32";
    case WeightFormat::NVFP4: return "nvfp4 1x16";
  }
  return "?";
}

Tensor dequantize(const LinearWeight& w) {
  Tensor out({w.out, w.in});
  if (w.format == WeightFormat::Dense) {
    to_f32(w.weight.dtype, w.weight.data, 0, size_t(w.out * w.in), out.ptr());
    return out;
  }
  const int64_t scols = w.scale.dim(1);
  std::vector<float> scale(size_t(w.scale.numel()));
  to_f32(w.scale.dtype, w.scale.data, 0, scale.size(), scale.data());
  const float global = nvfp4_global_scale(w);
  if (w.format == WeightFormat::NVFP4)
    for (float& s : scale) s *= global;  // ModelOpt: scale = weight_scale.float() * weight_scale_2, then codes x scale
  for (int64_t i = 0; i < w.out; ++i) {
    float* row = out.row(i);
    if (w.format == WeightFormat::FP8) {
      to_f32(DType::F8_E4M3, w.weight.data, size_t(i * w.in), size_t(w.in), row);
      for (int64_t k = 0; k < w.in; ++k) row[k] *= scale[size_t((i / 128) * scols + k / 128)];
    } else {
      const int64_t block = w.format == WeightFormat::NVFP4 ? 16 : 32;
      to_f32(DType::F4_E2M1, w.weight.data, size_t(i * w.in), size_t(w.in), row);
      for (int64_t k = 0; k < w.in; ++k) row[k] *= scale[size_t(i * scols + k / block)];
    }
  }
  return out;
}

float nvfp4_global_scale(const LinearWeight& w) {
  if (w.format != WeightFormat::NVFP4 || !w.scale2.data) return 0.0f;
  float g;
  to_f32(w.scale2.dtype, w.scale2.data, 0, 1, &g);
  return g;
}

bool w13_share_global_scale(const ExpertWeights& e) {
  return e.w1.format == WeightFormat::NVFP4 && e.w3.format == WeightFormat::NVFP4 &&
         nvfp4_global_scale(e.w1) == nvfp4_global_scale(e.w3);
}

namespace {


std::string dtypes_str(const std::vector<DType>& ts) {
  std::string s;
  for (DType t : ts) s += (s.empty() ? "" : " or ") + std::string(dtype_name(t));
  return s;
}

// Looks tensors up by canonical name, checks them, and records which were used.
class Binder {
 public:
  Binder(const Checkpoint& ckpt, std::vector<std::string>* problems) : problems_(problems) {
    const auto& files = ckpt.files();
    where_ = files.empty() ? "checkpoint" : files.size() == 1 ? files[0]->path() : files[0]->path() + " (and other shards)";
    for (const TensorEntry* e : ckpt.all()) {
      std::string c = names::canonical(e->name);
      auto [it, fresh] = by_name_.emplace(c, e);
      if (!fresh)
        fail(e->file, ": tensors '", it->second->name, "' and '", e->name, "' are the same weight (", c, ")");
    }
  }

  bool has(const std::string& name) const { return by_name_.count(name) != 0; }

  // A parameter tensor of one of the float dtypes (or `types`) with an exact shape.
  TensorView param(const std::string& name, const Shape& shape,
                   const std::vector<DType>& types = {DType::BF16, DType::F32, DType::F16}) {
    const TensorEntry* e = get(name);
    if (!e) return {};
    bool ok = false;
    for (DType t : types) ok |= e->view.dtype == t;
    if (!ok) return problem(e, cat("dtype ", dtype_name(e->view.dtype), ", expected ", dtypes_str(types)));
    if (e->view.shape != shape)
      return problem(e, cat("shape ", shape_str(e->view.shape), ", expected ", shape_str(shape)));
    return e->view;
  }

  // A linear weight `<base>.weight` (+ `<base>.scale`) of logical shape [out, in].
  LinearWeight linear(const std::string& base, int64_t out, int64_t in) {
    LinearWeight w;
    w.name = base + ".weight";
    w.out = out;
    w.in = in;
    const TensorEntry* e = get(w.name);
    if (!e) return w;
    const TensorView& v = e->view;
    const bool has_scale = has(base + ".scale");
    // The format is read from the siblings present, never from the name (FORMATS.md 4.8): ModelOpt's
    // `.weight_scale*` / `.input_scale` replace DeepSeek's `.scale` on the tensors it converted.
    if (has(base + ".weight_scale") || has(base + ".weight_scale_2") || has(base + ".input_scale")) {
      if (has_scale)
        return bad(w, e, cat("has both '", base, ".scale' and ModelOpt '.weight_scale' siblings: the format is ambiguous"));
      return nvfp4(w, e, base);
    }
    switch (v.dtype) {
      case DType::BF16: case DType::F32: case DType::F16:
        if (v.shape != Shape{out, in})
          return bad(w, e, cat("shape ", shape_str(v.shape), ", expected ", shape_str({out, in})));
        w.format = WeightFormat::Dense;
        w.weight = v;
        return w;
      case DType::F8_E4M3: {
        if (v.shape != Shape{out, in})
          return bad(w, e, cat("shape ", shape_str(v.shape), ", expected ", shape_str({out, in})));
        if (!has_scale) return bad(w, e, cat("is F8_E4M3 but '", base, ".scale' is missing"));
        w.format = WeightFormat::FP8;
        w.weight = v;
        w.scale = param(base + ".scale", {(out + 127) / 128, (in + 127) / 128}, {DType::F8_E8M0, DType::F32});
        return w;
      }
      case DType::I8: case DType::U8: case DType::F4_E2M1: {
        if (in % 32 != 0) return bad(w, e, cat("packed FP4 needs in % 32 == 0, in = ", in));
        if (v.shape != Shape{out, in / 2})
          return bad(w, e, cat("shape ", shape_str(v.shape), ", expected packed FP4 ", shape_str({out, in / 2}),
                               " (logical ", shape_str({out, in}), ")"));
        if (!has_scale) return bad(w, e, cat("is packed FP4 but '", base, ".scale' is missing"));
        w.format = WeightFormat::FP4;
        w.weight = v;
        w.weight.dtype = DType::F4_E2M1;
        w.weight.shape = {out, in};
        w.scale = param(base + ".scale", {out, in / 32}, {DType::F8_E8M0});
        return w;
      }
      default:
        return bad(w, e, cat("dtype ", dtype_name(v.dtype), ", expected BF16, F32, F8_E4M3 (+ .scale) or I8 packed FP4"));
    }
  }

  // A ModelOpt NVFP4 linear: packed e2m1 `.weight`, e4m3 `.weight_scale` [out, in/16], f32
  // `.weight_scale_2` [] (or [1]), optional f32 `.input_scale` [] (or [1]).
  LinearWeight nvfp4(LinearWeight w, const TensorEntry* e, const std::string& base) {
    const TensorView& v = e->view;
    const int64_t out = w.out, in = w.in;
    if (v.dtype != DType::U8 && v.dtype != DType::I8 && v.dtype != DType::F4_E2M1)
      return bad(w, e, cat("dtype ", dtype_name(v.dtype), " with ModelOpt '.weight_scale' siblings: not a format dsv4 ",
                           "reads (NVFP4 needs a U8 packed e2m1 weight)"));
    if (in % 16 != 0) return bad(w, e, cat("NVFP4 needs in % 16 == 0, in = ", in));
    if (v.shape != Shape{out, in / 2})
      return bad(w, e, cat("shape ", shape_str(v.shape), ", expected packed NVFP4 ", shape_str({out, in / 2}),
                           " (logical ", shape_str({out, in}), ")"));
    for (const char* sib : {".weight_scale", ".weight_scale_2"})
      if (!has(base + sib))
        return bad(w, e, cat("is NVFP4 (ModelOpt siblings present) but '", base, sib, "' is missing"));
    w.format = WeightFormat::NVFP4;
    w.weight = v;
    w.weight.dtype = DType::F4_E2M1;
    w.weight.shape = {out, in};
    w.scale = param(base + ".weight_scale", {out, in / 16}, {DType::F8_E4M3});
    // Scalars: ModelOpt writes them 0-d; some exporters write [1].
    w.scale2 = param_numel(base + ".weight_scale_2", 1, {DType::F32});
    if (has(base + ".input_scale")) w.input_scale = param_numel(base + ".input_scale", 1, {DType::F32});
    if (!w.scale.data || !w.scale2.data || (has(base + ".input_scale") && !w.input_scale.data)) {
      w.weight = {};
      return w;
    }
    if (const float g = nvfp4_global_scale(w); !(std::isfinite(g) && g > 0))
      return bad(w, find(base + ".weight_scale_2"), cat("weight_scale_2 = ", g, ", expected a positive finite number"));
    return w;
  }

  // A tensor whose shape only has to hold `n` elements (shapes not seen in a published header).
  TensorView param_numel(const std::string& name, int64_t n, const std::vector<DType>& types) {
    const TensorEntry* e = by_name_.count(name) ? by_name_.at(name) : nullptr;
    if (!e) return param(name, {n}, types);  // reports it missing
    if (e->view.numel() != n)
      return problem(e, cat("shape ", shape_str(e->view.shape), " (", e->view.numel(), " elements), expected ", n,
                            " elements"));
    return param(name, e->view.shape, types);
  }

  void report(const std::string& msg) {
    if (!problems_) throw Error(msg);
    problems_->push_back(msg);
  }

  std::vector<std::string> unused() const {
    std::vector<std::string> out;
    for (const auto& [name, e] : by_name_)
      if (!used_.count(name)) out.push_back(e->name);
    return out;
  }

 private:
  const TensorEntry* get(const std::string& name) {
    auto it = by_name_.find(name);
    if (it == by_name_.end()) {
      report(cat(where_, ": tensor '", name, "' is missing"));
      return nullptr;
    }
    used_.insert(name);
    return it->second;
  }
  const TensorEntry* find(const std::string& name) const { return by_name_.at(name); }
  TensorView problem(const TensorEntry* e, const std::string& what) {
    report(cat(e->file, ": tensor '", e->name, "': ", what));
    return {};
  }
  LinearWeight bad(LinearWeight w, const TensorEntry* e, const std::string& what) {
    problem(e, what);
    w.weight = {};
    return w;
  }

  std::map<std::string, const TensorEntry*> by_name_;
  std::set<std::string> used_;
  std::vector<std::string>* problems_;
  std::string where_;
};

HcWeights bind_hc(Binder& b, const std::string& prefix, int64_t rows, int64_t width, int64_t nscale) {
  return {b.param(prefix + "_fn", {rows, width}, {DType::F32}), b.param(prefix + "_base", {rows}, {DType::F32}),
          b.param(prefix + "_scale", {nscale}, {DType::F32})};
}

CompressorWeights bind_compressor(Binder& b, const std::string& p, int64_t ratio, int64_t dc, int64_t c, int64_t D) {
  CompressorWeights w;
  w.wkv = b.linear(p + "wkv", c * dc, D);
  w.wgate = b.linear(p + "wgate", c * dc, D);
  w.ape = b.param(p + "ape", {ratio, c * dc}, {DType::F32, DType::BF16});
  w.norm = b.param(p + "norm.weight", {dc});
  return w;
}

BlockWeights bind_block(Binder& b, const ModelConfig& cfg, const LayerSpec& spec, const std::string& p) {
  const int64_t D = cfg.hidden_size, n = cfg.hc_mult, H = cfg.num_heads, d = cfg.head_dim;
  BlockWeights w;
  w.hc_attn = bind_hc(b, p + "hc_attn", (2 + n) * n, n * D, 3);
  w.hc_ffn = bind_hc(b, p + "hc_ffn", (2 + n) * n, n * D, 3);
  w.attn_norm = b.param(p + "attn_norm.weight", {D});
  w.ffn_norm = b.param(p + "ffn_norm.weight", {D});

  AttentionWeights& a = w.attn;
  a.wq_a = b.linear(p + "attn.wq_a", cfg.q_lora_rank, D);
  a.q_norm = b.param(p + "attn.q_norm.weight", {cfg.q_lora_rank});
  a.wq_b = b.linear(p + "attn.wq_b", H * d, cfg.q_lora_rank);
  a.wkv = b.linear(p + "attn.wkv", d, D);
  a.kv_norm = b.param(p + "attn.kv_norm.weight", {d});
  a.wo_a = b.linear(p + "attn.wo_a", cfg.o_groups * cfg.o_lora_rank, H * d / cfg.o_groups);
  a.wo_b = b.linear(p + "attn.wo_b", D, cfg.o_groups * cfg.o_lora_rank);
  a.attn_sink = b.param(p + "attn.attn_sink", {H}, {DType::F32, DType::BF16});
  if (spec.attn != AttnKind::Sliding) {
    const int64_t c = spec.attn == AttnKind::CSA ? 2 : 1;
    a.compressor = bind_compressor(b, p + "attn.compressor.", spec.ratio, d, c, D);
  }
  if (spec.attn == AttnKind::CSA) {
    IndexerWeights ix;
    ix.wq_b = b.linear(p + "attn.indexer.wq_b", cfg.index_n_heads * cfg.index_head_dim, cfg.q_lora_rank);
    ix.weights_proj = b.linear(p + "attn.indexer.weights_proj", cfg.index_n_heads, D);
    ix.compressor = bind_compressor(b, p + "attn.indexer.compressor.", spec.ratio, cfg.index_head_dim, 2, D);
    a.indexer = ix;
  }

  MoeWeights& m = w.ffn;
  const int64_t E = cfg.n_routed_experts, I = cfg.moe_inter_dim;
  m.gate = b.linear(p + "ffn.gate", E, D);
  if (spec.route == RouteKind::TopK)
    m.bias = b.param(p + "ffn.gate.bias", {E}, {DType::F32, DType::BF16});
  else
    m.tid2eid = b.param(p + "ffn.gate.tid2eid", {cfg.vocab_size, cfg.experts_per_tok}, {DType::I32, DType::I64});
  m.experts.resize(static_cast<size_t>(E));
  for (int64_t e = 0; e < E; ++e) {
    const std::string q = p + "ffn.experts." + std::to_string(e) + ".";
    m.experts[size_t(e)] = {b.linear(q + "w1", I, D), b.linear(q + "w2", D, I), b.linear(q + "w3", I, D)};
  }
  const int64_t Is = I * cfg.n_shared_experts;
  if (cfg.n_shared_experts > 0) {
    const std::string q = p + "ffn.shared_experts.";
    m.shared = {b.linear(q + "w1", Is, D), b.linear(q + "w2", D, Is), b.linear(q + "w3", Is, D)};
  }
  return w;
}

// DSpark stages mtp.0.. (FORMATS.md 8.2), told apart from an original MTP block by the tensors present
// (`mtp.0.main_proj` instead of `e_proj`); the config's dspark_* fields and the stages come together.
void bind_dspark(Binder& b, const ModelConfig& cfg, Weights& w) {
  const std::string first = names::mtp(0, "main_proj.weight");
  if (!cfg.dspark.present()) {
    if (b.has(first))
      b.report(cat(cfg.source, ": the checkpoint holds DSpark stage tensors ('", first,
                   "') but the config has no dspark_* fields"));
    return;
  }
  if (!b.has(first)) {
    b.report(cat(cfg.source, ": field 'dspark_block_size' is set (a DSpark drafter) but the checkpoint has no DSpark ",
                 "stages ('", first, "' is missing)"));
    return;
  }
  const int64_t D = cfg.hidden_size, n = cfg.hc_mult, V = cfg.vocab_size, R = cfg.dspark.markov_rank;
  const int64_t targets = int64_t(cfg.dspark.target_layer_ids.size());
  int stages = 0;
  while (b.has(names::mtp(stages, "attn_norm.weight"))) ++stages;
  for (int k = 0; k < stages; ++k) {
    LayerSpec spec;  // ratio 0, score routing (FORMATS.md 8.2) unless the config's tail says otherwise
    if (size_t(k) < cfg.mtp_layers.size()) spec = cfg.mtp_layers[size_t(k)];
    spec.route = RouteKind::TopK;
    const std::string p = names::mtp(k, "");
    DSparkWeights s;
    s.block = bind_block(b, cfg, spec, p);
    if (k == 0) {
      s.main_proj = b.linear(p + "main_proj", D, targets * D);
      s.main_norm = b.param(p + "main_norm.weight", {D});
    }
    if (k == stages - 1) {
      s.norm = b.param(p + "norm.weight", {D});
      s.hc_head = bind_hc(b, p + "hc_head", n, n * D, 1);
      s.markov_w1 = b.linear(p + "markov_head.markov_w1", V, R);
      s.markov_w2 = b.linear(p + "markov_head.markov_w2", V, R);
      s.confidence = b.param_numel(p + "confidence_head.proj.weight", D + R, {DType::BF16, DType::F32});
    }
    w.dspark.push_back(std::move(s));
  }
}

}  // namespace

Weights bind_weights(const ModelConfig& cfg, const Checkpoint& ckpt, std::vector<std::string>* problems) {
  Binder b(ckpt, problems);
  const int64_t D = cfg.hidden_size, n = cfg.hc_mult, V = cfg.vocab_size;
  Weights w;
  w.embed = b.param("embed.weight", {V, D});
  w.head = b.linear("head", V, D);
  w.norm = b.param("norm.weight", {D});
  w.hc_head = bind_hc(b, "hc_head", n, n * D, 1);
  for (int64_t i = 0; i < cfg.num_layers; ++i)
    w.layers.push_back(bind_block(b, cfg, cfg.layers[size_t(i)], names::layer(int(i), "")));

  // MTP blocks: those present in the checkpoint (mtp.K.*), described by the config's tail entries.
  for (int k = 0; b.has(names::mtp(k, "e_proj.weight")); ++k) {
    LayerSpec spec;  // sliding, top-k routing unless the config says otherwise
    if (size_t(k) < cfg.mtp_layers.size()) spec = cfg.mtp_layers[size_t(k)];
    spec.route = RouteKind::TopK;
    MtpWeights m;
    const std::string p = names::mtp(k, "");
    m.block = bind_block(b, cfg, spec, p);
    m.e_proj = b.linear(p + "e_proj", D, D);
    m.h_proj = b.linear(p + "h_proj", D, D);
    m.enorm = b.param(p + "enorm.weight", {D});
    m.hnorm = b.param(p + "hnorm.weight", {D});
    m.norm = b.param(p + "norm.weight", {D});
    m.hc_head = bind_hc(b, p + "hc_head", n, n * D, 1);
    w.mtp.push_back(std::move(m));
  }
  bind_dspark(b, cfg, w);
  w.unused = b.unused();
  return w;
}

}  // namespace dsv4
