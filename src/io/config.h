// ModelConfig: the one typed description of a DeepSeek-V4 model, parsed from config.json in either
// the published legacy form (compress_ratios, num_hash_layers, qk_rope_head_dim, rope_scaling) or the
// transformers form (layer_types, compress_rates, mlp_layer_types, rope_parameters). FORMATS.md §2.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace dsv4 {

enum class AttnKind : uint8_t { Sliding, CSA, HCA };  // ratio 0 / 4 (overlap + indexer) / m > 4
enum class RouteKind : uint8_t { Hash, TopK };        // tid2eid lookup / top-k of score + bias

const char* attn_kind_name(AttnKind k);  // "sliding", "csa", "hca"

struct RopeConfig {
  double theta = 10000.0;
  bool yarn = false;
  double factor = 1.0;                  // YaRN scaling factor
  int64_t original_max_position = 0;    // YaRN original_max_position_embeddings
  double beta_fast = 32.0, beta_slow = 1.0;
};

struct LayerSpec {
  AttnKind attn = AttnKind::Sliding;
  int ratio = 0;  // compress ratio: 0, 4 (CSA) or the HCA ratio
  RouteKind route = RouteKind::TopK;
};

// DSpark drafter description (FORMATS.md 2.3, 8.2): the `dspark_*` fields of the 0731 / 0813 configs.
struct DSparkConfig {
  int64_t block_size = 0;                // dspark_block_size (0: no DSpark fields)
  int64_t noise_token_id = -1;           // dspark_noise_token_id
  int64_t markov_rank = 0;               // dspark_markov_rank
  std::vector<int64_t> target_layer_ids; // dspark_target_layer_ids (main layers whose states it reads)
  bool present() const { return block_size > 0; }
};

struct ModelConfig {
  std::string source;  // path of the config.json it came from (for messages)
  std::string form;    // "legacy" or "transformers"

  int64_t vocab_size = 0;
  int64_t hidden_size = 0;       // D
  int64_t num_layers = 0;        // L (main stack, without MTP blocks)
  int64_t num_heads = 0;         // H
  int64_t head_dim = 0;          // d
  int64_t rope_dim = 0;          // d_r (qk_rope_head_dim): the LAST rope_dim dims of a head rotate
  int64_t q_lora_rank = 0;
  int64_t o_groups = 0;
  int64_t o_lora_rank = 0;
  int64_t sliding_window = 0;    // W

  int64_t n_routed_experts = 0;
  int64_t n_shared_experts = 0;
  int64_t experts_per_tok = 0;
  int64_t moe_inter_dim = 0;
  double routed_scaling_factor = 1.0;
  double swiglu_limit = 0.0;     // 0 = no clamp
  bool norm_topk_prob = true;

  int64_t index_n_heads = 0;
  int64_t index_head_dim = 0;
  int64_t index_topk = 0;

  int64_t hc_mult = 4;
  int64_t hc_sinkhorn_iters = 20;
  double hc_eps = 1e-6;
  double rms_norm_eps = 1e-6;

  RopeConfig rope_main;      // sliding layers and MTP blocks
  RopeConfig rope_compress;  // CSA / HCA layers (theta = compress_rope_theta, YaRN)

  int64_t max_position_embeddings = 0;
  int64_t bos_token_id = 0;
  int64_t eos_token_id = 1;
  bool tie_word_embeddings = false;

  std::string expert_dtype;        // top-level "expert_dtype" ("fp4" / "fp8"), "" when absent; informational:
                                   // the loader decides each tensor's format from what the checkpoint holds
  std::string moe_quant_algo;      // quantization_config.moe_quant_algo ("NVFP4" for ModelOpt), "" when absent
  DSparkConfig dspark;

  std::vector<LayerSpec> layers;      // size num_layers
  std::vector<LayerSpec> mtp_layers;  // MTP blocks described by the config (compress_ratios tail or
                                      // num_nextn_predict_layers); the checkpoint decides what exists

  const RopeConfig& rope_for(const LayerSpec& l) const {
    return l.attn == AttnKind::Sliding ? rope_main : rope_compress;
  }
  // Layer `i` of the forward: 0 .. num_layers-1 the main stack, num_layers + k MTP block k (routed
  // top-k; a block the config does not describe is a sliding-window layer).
  LayerSpec layer_at(int64_t i) const;
};

// Parses config.json text. `source` names the file in error messages. Throws dsv4::Error with a
// one-line message naming the file and field on a missing field, a wrong type, an unknown layer type
// or compress ratio, or inconsistent sizes.
ModelConfig parse_config(const std::string& json_text, const std::string& source);
// Reads DIR/config.json (or a path to a .json file).
ModelConfig load_config(const std::string& path);

}  // namespace dsv4
