// Bad config.json files: each must fail with one line naming the file, the field and what was expected.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "io/config.h"
#include "sample_configs.h"
#include "temp_dir.h"

namespace dsv4 {
namespace {

using json = nlohmann::json;
const std::string kSrc = "models/x/config.json";

::testing::AssertionResult Contains(const std::string& s, const std::string& sub) {
  if (s.find(sub) != std::string::npos) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "\"" << s << "\"\n  does not contain \"" << sub << "\"";
}

// The message of the dsv4::Error that parsing `text` throws ("no error" if none); checks it is one line.
std::string text_error(const std::string& text) {
  try {
    parse_config(text, kSrc);
  } catch (const Error& e) {
    std::string m = e.what();
    EXPECT_EQ(m.find('\n'), std::string::npos) << m;
    return m;
  }
  return "no error";
}
std::string error_of(const json& j) { return text_error(j.dump()); }

json flash() { return test::flash_legacy_config(); }
json tiny() { return test::tiny_transformers_config(); }

TEST(ConfigErrors, MissingRequiredField) {
  for (const char* k :
       {"vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "head_dim", "q_lora_rank", "o_groups",
        "o_lora_rank", "sliding_window", "n_routed_experts", "num_experts_per_tok", "moe_intermediate_size",
        "index_n_heads", "index_head_dim", "index_topk"}) {
    json j = flash();
    j.erase(k);
    std::string expected = std::string(k) == "num_experts_per_tok" ? "an integer in [1, 256]" : "a positive integer";
    EXPECT_EQ(error_of(j),
              kSrc + ": field '" + k + "': expected " + expected + ", found nothing (the field is missing)");
  }
  json j = flash();
  j.erase("compress_ratios");
  EXPECT_EQ(error_of(j), kSrc +
                             ": field 'compress_ratios': expected a list of per-layer compress ratios (or "
                             "'layer_types' in the transformers form), found nothing (the field is missing)");
  j = flash();
  j.erase("num_hash_layers");
  EXPECT_EQ(error_of(j),
            kSrc + ": field 'num_hash_layers': expected an integer in [0, 43], found nothing (the field is missing)");
  j = flash();
  j.erase("qk_rope_head_dim");
  EXPECT_TRUE(
      Contains(error_of(j), "field 'qk_rope_head_dim': expected a positive integer (or 'partial_rotary_factor')"));
  j = flash();
  j["hidden_size"] = nullptr;
  EXPECT_EQ(error_of(j), kSrc + ": field 'hidden_size': expected a positive integer, found null");
}

TEST(ConfigErrors, WrongType) {
  json j = flash();
  j["hidden_size"] = "4096";
  EXPECT_EQ(error_of(j), kSrc + ": field 'hidden_size': expected a positive integer, found string \"4096\"");
  j = flash();
  j["head_dim"] = 512.5;
  EXPECT_EQ(error_of(j), kSrc + ": field 'head_dim': expected a positive integer, found number 512.5");
  j = flash();
  j["vocab_size"] = true;
  EXPECT_EQ(error_of(j), kSrc + ": field 'vocab_size': expected a positive integer, found boolean true");
  j = flash();
  j["norm_topk_prob"] = "yes";
  EXPECT_EQ(error_of(j), kSrc + ": field 'norm_topk_prob': expected true or false, found string \"yes\"");
  j = flash();
  j["rope_theta"] = {10000};
  EXPECT_EQ(error_of(j), kSrc + ": field 'rope_theta': expected a positive number, found array [10000]");
  j = flash();
  j["compress_ratios"] = {{"a", 1}};
  EXPECT_TRUE(
      Contains(error_of(j), "field 'compress_ratios': expected a list of per-layer compress ratios, found object"));
  j = flash();
  j["rope_scaling"] = 5;
  EXPECT_EQ(error_of(j), kSrc + ": field 'rope_scaling': expected an object, found number 5");
  j = flash();
  j["scoring_func"] = 3;
  EXPECT_EQ(error_of(j), kSrc + ": field 'scoring_func': expected a string, found number 3");
  j = tiny();
  j["layer_types"] = "sliding_attention";
  EXPECT_TRUE(Contains(error_of(j), "field 'layer_types': expected a list of per-layer attention types, found string"));
  j = tiny();
  j["mlp_layer_types"] = 1;
  EXPECT_TRUE(Contains(error_of(j), "field 'mlp_layer_types': expected a list of per-layer MoE types, found number 1"));
  j = tiny();
  j["rope_parameters"]["compress"]["factor"] = "16";
  EXPECT_EQ(error_of(j),
            kSrc + ": field 'rope_parameters.compress.factor': expected a positive number, found string \"16\"");
  EXPECT_EQ(text_error("[1, 2]"), kSrc + ": expected a JSON object, found array [1,2]");
}

TEST(ConfigErrors, UnknownCompressRatio) {
  for (const json& v : {json(1), json(2), json(3), json(5), json(6), json(12), json(-4), json(4.5), json("4"),
                        json(nullptr), json(int64_t(1) << 31), json(int64_t(1) << 62)}) {
    json j = flash();
    j["compress_ratios"][3] = v;
    EXPECT_EQ(error_of(j), kSrc + ": compress_ratios[3] = " + v.dump() +
                               ": expected 0 (sliding), 4 (CSA) or a power of two >= 8 (HCA)");
  }
  json j = flash();
  j["compress_ratios"][43] = 2;  // the MTP entry is checked too
  EXPECT_TRUE(Contains(error_of(j), ": compress_ratios[43] = 2: expected"));
  for (int ok : {8, 16, 32, 64, 128, 256, 1024}) {
    j = flash();
    j["compress_ratios"][3] = ok;
    EXPECT_EQ(error_of(j), "no error") << ok;
  }
  j = flash();
  j["compress_ratios"] = json::array({0, 0, 4});
  EXPECT_EQ(error_of(j), kSrc +
                             ": field 'compress_ratios': expected at least num_hidden_layers = 43 entries (one per "
                             "layer, then one per MTP block), found 3");
}

TEST(ConfigErrors, UnknownLayerType) {
  json j = tiny();
  j["layer_types"][2] = "dense_attention";
  EXPECT_EQ(error_of(j), kSrc +
                             ": layer_types[2] = \"dense_attention\": expected \"sliding_attention\", "
                             "\"compressed_sparse_attention\" or \"heavily_compressed_attention\"");
  j = tiny();
  j["layer_types"][0] = 0;
  EXPECT_TRUE(Contains(error_of(j), ": layer_types[0] = 0: expected \"sliding_attention\""));
  j = tiny();
  j["mlp_layer_types"][5] = "dense";
  EXPECT_EQ(error_of(j), kSrc + ": mlp_layer_types[5] = \"dense\": expected \"hash_moe\" or \"moe\"");
  j = tiny();
  j["layer_types"].erase(5);
  EXPECT_EQ(error_of(j), kSrc + ": field 'layer_types': expected num_hidden_layers = 6 entries, found 5");
  j = tiny();
  j["mlp_layer_types"].push_back("moe");
  EXPECT_EQ(error_of(j), kSrc + ": field 'mlp_layer_types': expected num_hidden_layers = 6 entries, found 7");
  j = tiny();
  j["compress_rates"]["compressed_sparse_attention"] = 8;
  EXPECT_EQ(error_of(j), kSrc +
                             ": field 'compress_rates.compressed_sparse_attention': expected 4 (the overlapping CSA "
                             "compressor), found number 8");
  j = tiny();
  j["compress_rates"]["heavily_compressed_attention"] = 12;
  EXPECT_EQ(error_of(j), kSrc +
                             ": field 'compress_rates.heavily_compressed_attention': expected a power of two >= 8, "
                             "found number 12");
}

TEST(ConfigErrors, UnknownRopeType) {
  json j = flash();
  j["rope_scaling"]["type"] = "llama3";
  EXPECT_EQ(error_of(j), kSrc +
                             ": field 'rope_scaling.type': expected \"yarn\" or \"default\" (the only rope types "
                             "DeepSeek-V4 uses), found string \"llama3\"");
  j = flash();
  j["rope_scaling"].erase("type");
  EXPECT_EQ(error_of(j), kSrc +
                             ": field 'rope_scaling.type': expected \"yarn\" or \"default\", found nothing (the "
                             "field is missing)");
  j = flash();
  j["rope_scaling"].erase("type");
  j["rope_scaling"]["rope_type"] = "yarn";  // the newer spelling is read too
  EXPECT_EQ(error_of(j), "no error");
  j = tiny();
  j["rope_parameters"]["compress"]["rope_type"] = "dynamic";
  EXPECT_TRUE(Contains(error_of(j), ": field 'rope_parameters.compress.rope_type': expected \"yarn\" or \"default\""));
  j = tiny();
  j["rope_parameters"]["main"]["rope_type"] = "linear";
  EXPECT_TRUE(Contains(error_of(j), ": field 'rope_parameters.main.rope_type': expected"));
  j = tiny();
  j["rope_parameters"]["compress"].erase("factor");
  EXPECT_EQ(error_of(j), kSrc +
                             ": field 'rope_parameters.compress.factor': expected a positive number, found nothing "
                             "(the field is missing)");
  j = tiny();
  j["rope_parameters"]["compress"]["attention_factor"] = 1.2772;
  EXPECT_TRUE(Contains(error_of(j), "field 'rope_parameters.compress.attention_factor': expected 1.0"));
  j = tiny();
  j["rope_parameters"] = {{"rope_type", "default"}, {"rope_theta", 10000}};
  EXPECT_TRUE(Contains(error_of(j), "field 'rope_parameters': expected an object with 'main' and 'compress'"));
}

TEST(ConfigErrors, MalformedJson) {
  std::string m = text_error("{\"vocab_size\": 1,, }");
  EXPECT_TRUE(Contains(m, kSrc + ": malformed JSON at byte 18: syntax error while parsing object key"));
  EXPECT_TRUE(Contains(text_error(""), kSrc + ": malformed JSON at byte 1: "));
  EXPECT_TRUE(Contains(text_error(flash().dump().substr(0, 300)), kSrc + ": malformed JSON at byte "));
  EXPECT_TRUE(Contains(text_error("{\"vocab_size\": 1e999}"), kSrc + ": malformed JSON"));
  EXPECT_TRUE(Contains(text_error("{\"a\": \"line\nbreak\"}"), kSrc + ": malformed JSON at byte "));
  EXPECT_EQ(text_error(flash().dump() + std::string(1, '\0') + "junk"),
            kSrc + ": malformed JSON at byte " + std::to_string(flash().dump().size()) + ": NUL byte");
}

TEST(ConfigErrors, InconsistentSizes) {
  json j = flash();
  j["o_groups"] = 3;
  EXPECT_EQ(error_of(j), kSrc + ": field 'o_groups': expected a divisor of num_attention_heads = 64, found number 3");
  j = flash();
  j["qk_rope_head_dim"] = 63;
  EXPECT_EQ(error_of(j), kSrc +
                             ": field 'qk_rope_head_dim': expected a rope dim that is even, positive and <= "
                             "head_dim = 512, found 63");
  j["qk_rope_head_dim"] = 1024;
  EXPECT_TRUE(Contains(error_of(j), "<= head_dim = 512, found 1024"));
  j = flash();
  j["num_hash_layers"] = 44;
  EXPECT_EQ(error_of(j), kSrc + ": field 'num_hash_layers': expected an integer in [0, 43], found number 44");
  j = flash();
  j["num_experts_per_tok"] = 257;
  EXPECT_EQ(error_of(j), kSrc + ": field 'num_experts_per_tok': expected an integer in [1, 256], found number 257");
  j = flash();
  j["hidden_size"] = 0;
  EXPECT_EQ(error_of(j), kSrc + ": field 'hidden_size': expected a positive integer, found number 0");
  j = flash();
  j["sliding_window"] = -128;
  EXPECT_EQ(error_of(j), kSrc + ": field 'sliding_window': expected a positive integer, found number -128");
  j = flash();
  j["scoring_func"] = "softmax";
  EXPECT_EQ(error_of(j), kSrc + ": field 'scoring_func': expected \"sqrtsoftplus\", found string \"softmax\"");
  j = flash();
  j["num_key_value_heads"] = 8;
  EXPECT_TRUE(Contains(error_of(j), "field 'num_key_value_heads': expected 1"));
  j = flash();
  j["hidden_act"] = "gelu";
  EXPECT_EQ(error_of(j), kSrc + ": field 'hidden_act': expected \"silu\", found string \"gelu\"");
  j = flash();
  j["index_head_dim"] = 32;
  EXPECT_TRUE(Contains(error_of(j), "field 'index_head_dim': expected an integer >= the rope dim 64"));
  j = flash();
  j["num_nextn_predict_layers"] = 5000;
  EXPECT_EQ(error_of(j),
            kSrc + ": field 'num_nextn_predict_layers': expected an integer in [0, 1024], found number 5000");
  j = flash();
  j["rms_norm_eps"] = 0;
  EXPECT_EQ(error_of(j), kSrc + ": field 'rms_norm_eps': expected a positive number, found number 0");
  j = flash();
  j["vocab_size"] = uint64_t(1) << 63;
  EXPECT_EQ(error_of(j), kSrc + ": field 'vocab_size': expected a positive integer, found number 9223372036854775808");
  j = tiny();
  j["qk_rope_head_dim"] = 16;  // partial_rotary_factor 0.125 of 64 says 8
  EXPECT_EQ(error_of(j),
            kSrc + ": field 'partial_rotary_factor' gives a rope dim of 8 but 'qk_rope_head_dim' gives 16");
  j = tiny();
  j["rope_parameters"]["compress"]["partial_rotary_factor"] = 0.25;
  EXPECT_TRUE(Contains(error_of(j), "field 'rope_parameters.compress.partial_rotary_factor' gives a rope dim of 16"));
  j = tiny();
  j["eos_token_id"] = json::array();
  EXPECT_TRUE(Contains(error_of(j), "field 'eos_token_id': expected a non-negative integer or a non-empty list"));
}

TEST(ConfigErrors, IndexerOnlyRequiredWithCsa) {
  json j = tiny();
  for (auto& t : j["layer_types"])
    if (t == "compressed_sparse_attention") t = "heavily_compressed_attention";
  for (const char* k : {"index_n_heads", "index_head_dim", "index_topk"}) j.erase(k);
  EXPECT_EQ(error_of(j), "no error");
  j["index_topk"] = -1;  // present but wrong is still an error
  EXPECT_EQ(error_of(j), kSrc + ": field 'index_topk': expected a positive integer, found number -1");
}

TEST(ConfigErrors, MissingFile) {
  test::TempDir tmp;
  try {
    load_config(tmp.path().string());
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), tmp.path().string() + ": cannot open config.json (No such file or directory)");
  }
  try {
    load_config(tmp.file("nope.json"));
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), tmp.file("nope.json") + ": cannot open (No such file or directory)");
  }
  tmp.write("config.json", "{ not json");
  try {
    load_config(tmp.path().string());
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_TRUE(Contains(e.what(), tmp.file("config.json") + ": malformed JSON at byte "));
  }
}

}  // namespace
}  // namespace dsv4

namespace dsv4 {
namespace {

// The 0731 revision: 46 compress_ratios (3 trailing zeros for the DSpark stages), stale
// num_nextn_predict_layers = 1, expert_dtype and the dspark_* set (FORMATS.md 2.3).
json flash_0731() {
  json j = test::flash_legacy_config();
  j["compress_ratios"].push_back(0);
  j["compress_ratios"].push_back(0);
  j["num_nextn_predict_layers"] = 1;
  j["expert_dtype"] = "fp4";
  j["dspark_block_size"] = 5;
  j["dspark_noise_token_id"] = 128799;
  j["dspark_target_layer_ids"] = {40, 41, 42};
  j["dspark_markov_rank"] = 256;
  return j;
}

TEST(Config0731, ParsesDSparkFields) {
  const ModelConfig c = parse_config(flash_0731().dump(), kSrc);
  EXPECT_EQ(c.layers.size(), 43u);
  EXPECT_EQ(c.mtp_layers.size(), 3u);
  for (const LayerSpec& m : c.mtp_layers) EXPECT_EQ(m.attn, AttnKind::Sliding);
  EXPECT_EQ(c.expert_dtype, "fp4");
  EXPECT_TRUE(c.dspark.present());
  EXPECT_EQ(c.dspark.block_size, 5);
  EXPECT_EQ(c.dspark.noise_token_id, 128799);
  EXPECT_EQ(c.dspark.markov_rank, 256);
  EXPECT_EQ(c.dspark.target_layer_ids, (std::vector<int64_t>{40, 41, 42}));
  EXPECT_FALSE(parse_config(flash().dump(), kSrc).dspark.present());
}

TEST(Config0731, BadVariantFields) {
  json j = flash_0731();
  j["dspark_target_layer_ids"] = {40, 43};
  EXPECT_TRUE(Contains(error_of(j), "dspark_target_layer_ids[1] = 43: expected a layer id in [0, 43)"));
  j = flash_0731();
  j.erase("dspark_markov_rank");
  EXPECT_TRUE(Contains(error_of(j), "field 'dspark_block_size' is set but 'dspark_markov_rank' is missing"));
  j = flash_0731();
  j["dspark_noise_token_id"] = 129280;
  EXPECT_TRUE(Contains(error_of(j), "field 'dspark_noise_token_id': expected an integer in [0, 129279]"));
  j = flash_0731();
  j["expert_dtype"] = "int4";
  EXPECT_TRUE(Contains(error_of(j), "field 'expert_dtype': expected \"fp4\" or \"fp8\", found string \"int4\""));
  j = flash_0731();
  j["dspark_target_layer_ids"] = json::array();
  EXPECT_TRUE(Contains(error_of(j), "field 'dspark_target_layer_ids': expected a non-empty list"));
}

}  // namespace
}  // namespace dsv4
