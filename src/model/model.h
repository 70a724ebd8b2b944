// The DeepSeek-V4 model on the CPU backend: config + weights + the forward pass over a chunk of
// tokens of one sequence, with its SequenceState (MODEL.md §2-§8).
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "io/config.h"
#include "io/safetensors.h"
#include "io/weights.h"
#include "model/cpu_weights.h"
#include "model/state.h"

namespace dsv4 {

// reference: float32 everywhere, matches transformers. official: DeepSeek's QAT numerics (bf16
// rounding, FP8 activation / KV and FP4 indexer quantization).
enum class Numerics { Reference, Official };
Numerics parse_numerics(const std::string& s);  // "reference" | "official"
const char* numerics_name(Numerics n);

struct ForwardOptions {
  bool all_logits = true;                // logits for every position of the chunk (else only the last)
  std::vector<Tensor>* hidden = nullptr;  // if set: streams at each layer boundary (fixtures' hidden_i)
  Tensor* streams = nullptr;              // if set: the last layer's output streams [T, n, D] (MTP input)
};

class Model {
 public:
  // Loads config.json and the safetensors of a model directory.
  // `progress` (optional) is called as weights are decoded.
  static std::unique_ptr<Model> load(const std::string& dir, Numerics numerics, const LoadProgress& progress = {});
  Model(ModelConfig cfg, std::unique_ptr<Checkpoint> ckpt, Numerics numerics, const LoadProgress& progress = {});

  const ModelConfig& config() const { return cfg_; }
  Numerics numerics() const { return numerics_; }
  size_t num_mtp() const { return w_.mtp.size(); }
  SequenceState new_state() const { return SequenceState(cfg_, w_.mtp.size()); }

  // Feeds tokens at positions state.pos.. and advances the state. Returns logits [T or 1, vocab].
  Tensor forward(SequenceState& state, const std::vector<int32_t>& tokens, const ForwardOptions& opt = {}) const;

  // MTP block k: inputs are the main model's last-layer streams X [T, n, D] (before hc_head) at
  // positions state.mtp_pos.. and the ids of the tokens that follow them. Returns logits [T, vocab].
  Tensor forward_mtp(SequenceState& state, const Tensor& streams, const std::vector<int32_t>& next_ids,
                     size_t k = 0) const;

  // Test access to sub-layers (tests/model_cuda compares the GPU layers with them): the attention of
  // layer `layer` on x [T, D] (attn-normed) at positions p0.. with that layer's state, the MoE on x
  // [T, D] (ffn-normed), and the hc_head collapse + final norm of streams X [T, n, D].
  Tensor attention_layer(size_t layer, LayerState& st, const Tensor& x, int64_t p0) const {
    return attention(w_.layers.at(layer).attn, cfg_.layers.at(layer), st, x, p0);
  }
  Tensor moe_layer(size_t layer, const Tensor& x, const std::vector<int32_t>& tokens) const {
    return moe(w_.layers.at(layer).ffn, cfg_.layers.at(layer), x, tokens);
  }
  Tensor head_hidden_of(const Tensor& X) const { return head_hidden(w_.hc_head, w_.norm, X, 0); }

 private:
  // Runs one decoder block over X [T, n, D] in place.
  void block(const BlockF& w, const LayerSpec& spec, LayerState& st, Tensor& X, const std::vector<int32_t>& tokens,
             int64_t p0) const;
  Tensor attention(const AttentionF& w, const LayerSpec& spec, LayerState& st, const Tensor& x, int64_t p0) const;
  Tensor moe(const MoeF& w, const LayerSpec& spec, const Tensor& x, const std::vector<int32_t>& tokens) const;
  // hc_head collapse + final norm of rows first.. of X [T, n, D] -> [T - first, D]
  Tensor head_hidden(const HcF& hc, const Tensor& norm, const Tensor& X, int64_t first) const;
  Tensor head_logits(const HcF& hc, const Tensor& norm, const Tensor& X, bool all) const;

  ModelConfig cfg_;
  std::unique_ptr<Checkpoint> ckpt_;
  Weights views_;
  CpuWeights w_;
  Numerics numerics_;
};

}  // namespace dsv4
