#include "model/model.h"

#include "backend/make_backend.h"
#include "core/error.h"
#include "io/dummy_weights.h"
#include "io/safetensors.h"

namespace dsv4 {

std::unique_ptr<Model> Model::load(const std::string& dir, const BackendOptions& o, const LoadProgress& progress) {
  ModelConfig cfg = load_config(dir);
  const auto ckpt = Checkpoint::open(dir);
  const Weights w = bind_weights(cfg, *ckpt);
  return std::make_unique<Model>(std::move(cfg), w, ckpt->total_bytes(), o, progress);
}

std::unique_ptr<Model> Model::load(const std::string& dir, Numerics numerics, const LoadProgress& progress) {
  BackendOptions o;
  o.numerics = numerics;
  o.capacity = {.max_seqs = 1 << 20, .max_ctx = int64_t(1) << 40, .max_tokens = int64_t(1) << 40};
  return load(dir, o, progress);
}

std::unique_ptr<Model> Model::dummy(const ModelConfig& cfg, const BackendOptions& o, uint64_t seed,
                                    const LoadProgress& progress) {
  const DummyWeights d(cfg, seed);
  return std::make_unique<Model>(cfg, d.weights(), d.total_bytes(), o, progress);
}

namespace {

// The official numerics' quantizers tile these widths exactly; refuse shapes they cannot handle.
void check_official_shapes(const ModelConfig& cfg) {
  if ((cfg.head_dim - cfg.rope_dim) % 64 != 0)
    fail(cfg.source, ": official numerics need head_dim - qk_rope_head_dim divisible by 64 (FP8 KV blocks), got ",
         cfg.head_dim - cfg.rope_dim, "; use --numerics reference");
  bool any_csa = false;
  for (int64_t i = 0; i < cfg.num_layers + int64_t(cfg.mtp_layers.size()); ++i)
    any_csa = any_csa || cfg.layer_at(i).attn == AttnKind::CSA;
  if (any_csa && (cfg.index_head_dim % 32 != 0 || (cfg.index_head_dim & (cfg.index_head_dim - 1)) != 0))
    fail(cfg.source, ": official numerics need index_head_dim a power of two >= 32, got ", cfg.index_head_dim,
         "; use --numerics reference");
}

const ModelConfig& checked(const ModelConfig& cfg, const BackendOptions& o) {
  if (o.numerics == Numerics::Official) check_official_shapes(cfg);
  return cfg;
}

}  // namespace

Model::Model(ModelConfig cfg, const Weights& w, uint64_t total_bytes, const BackendOptions& o,
             const LoadProgress& progress)
    : cfg_(std::move(cfg)), be_(make_backend(checked(cfg_, o), w, total_bytes, o, progress)) {}

}  // namespace dsv4
