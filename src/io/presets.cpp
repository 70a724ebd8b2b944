#include "io/presets.h"

#include <nlohmann/json.hpp>

#include "core/error.h"

namespace dsv4 {
namespace {

// compress_ratios, one entry per layer plus the MTP block (FORMATS.md §2.1, §2.2):
// Flash [0, 0, 4, 128, 4, 128, ..., 4, 128, 4, 0] (44), Pro [128, 128, 4, 128, ..., 4, 128, 4, 0] (62).
std::vector<int> ratios(int layers, int first_two) {
  std::vector<int> r;
  for (int i = 0; i < layers; ++i) r.push_back(i < 2 ? first_two : (i % 2 == 0 ? 4 : 128));
  r.push_back(0);  // the MTP block: sliding window only
  return r;
}

nlohmann::ordered_json flash_json() {
  nlohmann::ordered_json j;
  j["architectures"] = {"DeepseekV4ForCausalLM"};
  j["model_type"] = "deepseek_v4";
  j["vocab_size"] = 129280;
  j["hidden_size"] = 4096;
  j["num_hidden_layers"] = 43;
  j["num_attention_heads"] = 64;
  j["num_key_value_heads"] = 1;
  j["head_dim"] = 512;
  j["qk_rope_head_dim"] = 64;
  j["q_lora_rank"] = 1024;
  j["o_groups"] = 8;
  j["o_lora_rank"] = 1024;
  j["sliding_window"] = 128;
  j["compress_ratios"] = ratios(43, 0);
  j["compress_rope_theta"] = 160000.0;
  j["rope_theta"] = 10000.0;
  j["rope_scaling"] = {{"type", "yarn"}, {"factor", 16}, {"original_max_position_embeddings", 65536},
                       {"beta_fast", 32}, {"beta_slow", 1}};
  j["max_position_embeddings"] = 1048576;
  j["index_n_heads"] = 64;
  j["index_head_dim"] = 128;
  j["index_topk"] = 512;
  j["n_routed_experts"] = 256;
  j["n_shared_experts"] = 1;
  j["num_experts_per_tok"] = 6;
  j["moe_intermediate_size"] = 2048;
  j["num_hash_layers"] = 3;
  j["scoring_func"] = "sqrtsoftplus";
  j["routed_scaling_factor"] = 1.5;
  j["norm_topk_prob"] = true;
  j["topk_method"] = "noaux_tc";
  j["swiglu_limit"] = 10.0;
  j["hc_mult"] = 4;
  j["hc_sinkhorn_iters"] = 20;
  j["hc_eps"] = 1e-6;
  j["rms_norm_eps"] = 1e-6;
  j["num_nextn_predict_layers"] = 1;
  j["hidden_act"] = "silu";
  j["bos_token_id"] = 0;
  j["eos_token_id"] = 1;
  j["tie_word_embeddings"] = false;
  j["torch_dtype"] = "bfloat16";
  j["quantization_config"] = {{"activation_scheme", "dynamic"}, {"fmt", "e4m3"}, {"quant_method", "fp8"},
                              {"scale_fmt", "ue8m0"}, {"weight_block_size", {128, 128}}};
  return j;
}

}  // namespace

std::vector<std::string> preset_names() { return {"flash", "pro"}; }

std::string preset_config_json(const std::string& name) {
  nlohmann::ordered_json j = flash_json();
  if (name == "pro") {  // FORMATS.md §2.2: only these fields differ from Flash
    j["hidden_size"] = 7168;
    j["num_hidden_layers"] = 61;
    j["num_attention_heads"] = 128;
    j["q_lora_rank"] = 1536;
    j["o_groups"] = 16;
    j["index_topk"] = 1024;
    j["n_routed_experts"] = 384;
    j["moe_intermediate_size"] = 3072;
    j["routed_scaling_factor"] = 2.5;
    j["compress_ratios"] = ratios(61, 128);
  } else if (name != "flash") {
    fail("unknown preset '", name, "' (expected flash or pro)");
  }
  return j.dump(1);
}

ModelConfig preset_config(const std::string& name) {
  return parse_config(preset_config_json(name), "preset:" + name);
}

void truncate_layers(ModelConfig& cfg, int64_t n) {
  if (n < 1 || n > cfg.num_layers)
    fail(cfg.source, ": --layers ", n, " is out of range (the model has ", cfg.num_layers, " layers)");
  cfg.num_layers = n;
  cfg.layers.resize(size_t(n));
  cfg.mtp_layers.clear();
}

}  // namespace dsv4
