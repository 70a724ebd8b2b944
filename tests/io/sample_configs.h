// Hand-built config.json objects of real shapes, for the config tests (no fixture files needed).
#pragma once
#include <nlohmann/json.hpp>

namespace dsv4::test {

// DeepSeek-V4-Flash in the published legacy form (FORMATS.md §2.1): 43 layers + 1 MTP block.
// compress_ratios: 0, 0, then 4 on even / 128 on odd layer ids up to layer 42 (= 4), then the MTP 0.
inline nlohmann::json flash_legacy_config() {
  nlohmann::json ratios = {0, 0};
  for (int i = 2; i < 43; ++i) ratios.push_back(i % 2 == 0 ? 4 : 128);
  ratios.push_back(0);
  return {
      {"architectures", {"DeepseekV4ForCausalLM"}},
      {"model_type", "deepseek_v4"},
      {"vocab_size", 129280},
      {"hidden_size", 4096},
      {"num_hidden_layers", 43},
      {"num_attention_heads", 64},
      {"num_key_value_heads", 1},
      {"head_dim", 512},
      {"qk_rope_head_dim", 64},
      {"q_lora_rank", 1024},
      {"o_groups", 8},
      {"o_lora_rank", 1024},
      {"sliding_window", 128},
      {"compress_ratios", ratios},
      {"compress_rope_theta", 160000},
      {"rope_theta", 10000},
      {"rope_scaling",
       {{"type", "yarn"},
        {"factor", 16},
        {"original_max_position_embeddings", 65536},
        {"beta_fast", 32},
        {"beta_slow", 1}}},
      {"max_position_embeddings", 1048576},
      {"index_n_heads", 64},
      {"index_head_dim", 128},
      {"index_topk", 512},
      {"n_routed_experts", 256},
      {"n_shared_experts", 1},
      {"num_experts_per_tok", 6},
      {"moe_intermediate_size", 2048},
      {"num_hash_layers", 3},
      {"scoring_func", "sqrtsoftplus"},
      {"routed_scaling_factor", 1.5},
      {"norm_topk_prob", true},
      {"topk_method", "noaux_tc"},
      {"swiglu_limit", 10.0},
      {"hc_mult", 4},
      {"hc_sinkhorn_iters", 20},
      {"hc_eps", 1e-06},
      {"rms_norm_eps", 1e-06},
      {"num_nextn_predict_layers", 1},
      {"hidden_act", "silu"},
      {"attention_bias", false},
      {"attention_dropout", 0.0},
      {"bos_token_id", 0},
      {"eos_token_id", 1},
      {"tie_word_embeddings", false},
      {"torch_dtype", "bfloat16"},
      {"quantization_config",
       {{"activation_scheme", "dynamic"},
        {"fmt", "e4m3"},
        {"quant_method", "fp8"},
        {"scale_fmt", "ue8m0"},
        {"weight_block_size", {128, 128}}}},
  };
}

// A small model in the transformers form (the shape of fixtures/tiny-a), 6 layers.
inline nlohmann::json tiny_transformers_config() {
  return {
      {"vocab_size", 512},
      {"hidden_size", 128},
      {"num_hidden_layers", 6},
      {"num_attention_heads", 4},
      {"num_key_value_heads", 1},
      {"head_dim", 64},
      {"partial_rotary_factor", 0.125},
      {"q_lora_rank", 64},
      {"o_groups", 2},
      {"o_lora_rank", 32},
      {"sliding_window", 8},
      {"layer_types",
       {"sliding_attention", "heavily_compressed_attention", "compressed_sparse_attention",
        "heavily_compressed_attention", "compressed_sparse_attention", "sliding_attention"}},
      {"compress_rates", {{"compressed_sparse_attention", 4}, {"heavily_compressed_attention", 16}}},
      {"mlp_layer_types", {"hash_moe", "hash_moe", "moe", "moe", "moe", "moe"}},
      {"rope_parameters",
       {{"main", {{"rope_type", "default"}, {"rope_theta", 10000.0}, {"partial_rotary_factor", 0.125}}},
        {"compress",
         {{"rope_type", "yarn"},
          {"rope_theta", 160000.0},
          {"factor", 16.0},
          {"original_max_position_embeddings", 65536},
          {"beta_fast", 32.0},
          {"beta_slow", 1.0},
          {"attention_factor", 1.0}}}}},
      {"index_n_heads", 4},
      {"index_head_dim", 32},
      {"index_topk", 4},
      {"n_routed_experts", 8},
      {"n_shared_experts", 1},
      {"num_experts_per_tok", 2},
      {"moe_intermediate_size", 64},
      {"max_position_embeddings", 4096},
  };
}

}  // namespace dsv4::test
