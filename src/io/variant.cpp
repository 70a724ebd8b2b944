#include "io/variant.h"

#include "core/error.h"

namespace dsv4 {

std::optional<WeightFormat> expert_format(const BlockWeights& b) {
  std::optional<WeightFormat> f;
  for (const ExpertWeights& e : b.ffn.experts)
    for (const LinearWeight* l : {&e.w1, &e.w2, &e.w3}) {
      if (!l->present()) return std::nullopt;
      if (f && *f != l->format) return std::nullopt;
      f = l->format;
    }
  return f;
}

namespace {

const char* expert_label(WeightFormat f) {
  switch (f) {
    case WeightFormat::Dense: return "dense (unquantized)";
    case WeightFormat::FP8: return "FP8 e4m3 128x128 (Base)";
    case WeightFormat::FP4: return "MXFP4 (FP4 + E8M0 per 32, instruct)";
    case WeightFormat::NVFP4: return "NVFP4 (ModelOpt)";
  }
  return "?";
}

}  // namespace

std::string variant_name(const ModelConfig& cfg, const Weights& w) {
  std::string shape = cfg.hidden_size == 4096 && cfg.n_routed_experts == 256   ? "V4-Flash shape"
                      : cfg.hidden_size == 7168 && cfg.n_routed_experts == 384 ? "V4-Pro shape"
                                                                               : cat("custom shape (hidden ", cfg.hidden_size,
                                                                                     ", ", cfg.n_routed_experts, " experts)");
  std::optional<WeightFormat> f;
  bool mixed = false;
  for (const BlockWeights& b : w.layers) {
    std::optional<WeightFormat> g = expert_format(b);
    if (!g || (f && *f != *g)) mixed = true;
    if (g) f = g;
  }
  std::string experts = mixed || !f ? "routed experts of mixed or unknown format" : cat("routed experts ", expert_label(*f));
  std::string extra;
  if (!w.dspark.empty())
    extra = cat(", ", w.dspark.size(), " DSpark stage(s) (0731 / 0813 layout)");
  else if (!w.mtp.empty())
    extra = cat(", ", w.mtp.size(), " MTP block(s)");
  return cat(shape, ", ", experts, extra);
}

}  // namespace dsv4
