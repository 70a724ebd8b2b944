// config.json parsing: every fixture config (both forms) against its own JSON and against hand-written
// expectations, and the published model shapes (Flash, Pro, Flash-0731).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "io/config.h"
#include "sample_configs.h"
#include "support/test_paths.h"
#include "temp_dir.h"

namespace dsv4 {
namespace {

using json = nlohmann::json;

#define REQUIRE_SHARED() \
  if (!test::have_shared()) GTEST_SKIP() << "no shared/fixtures folder"

json read_json(const std::string& path) {
  std::ifstream in(path);
  return json::parse(in);
}

// "S H16 C4 ..." for the attention kinds and ratios, "HHT..." for the routes: compact and readable.
std::string kinds(const std::vector<LayerSpec>& ls) {
  std::string s;
  for (const LayerSpec& l : ls) {
    if (!s.empty()) s += ' ';
    if (l.attn == AttnKind::Sliding) {
      s += 'S';
    } else {
      s += l.attn == AttnKind::CSA ? 'C' : 'H';
      s += std::to_string(l.ratio);
    }
  }
  return s;
}
std::string routes(const std::vector<LayerSpec>& ls) {
  std::string s;
  for (const LayerSpec& l : ls) s += l.route == RouteKind::Hash ? 'H' : 'T';
  return s;
}

// Checks every parsed field against the JSON it came from, read here with nlohmann directly.
void expect_matches_json(const ModelConfig& c, const json& j) {
  EXPECT_EQ(c.vocab_size, j.at("vocab_size").get<int64_t>());
  EXPECT_EQ(c.hidden_size, j.at("hidden_size").get<int64_t>());
  EXPECT_EQ(c.num_layers, j.at("num_hidden_layers").get<int64_t>());
  EXPECT_EQ(c.num_heads, j.at("num_attention_heads").get<int64_t>());
  EXPECT_EQ(c.head_dim, j.at("head_dim").get<int64_t>());
  EXPECT_EQ(c.rope_dim, j.at("qk_rope_head_dim").get<int64_t>());
  EXPECT_EQ(c.q_lora_rank, j.at("q_lora_rank").get<int64_t>());
  EXPECT_EQ(c.o_groups, j.at("o_groups").get<int64_t>());
  EXPECT_EQ(c.o_lora_rank, j.at("o_lora_rank").get<int64_t>());
  EXPECT_EQ(c.sliding_window, j.at("sliding_window").get<int64_t>());
  EXPECT_EQ(c.n_routed_experts, j.at("n_routed_experts").get<int64_t>());
  EXPECT_EQ(c.n_shared_experts, j.at("n_shared_experts").get<int64_t>());
  EXPECT_EQ(c.experts_per_tok, j.at("num_experts_per_tok").get<int64_t>());
  EXPECT_EQ(c.moe_inter_dim, j.at("moe_intermediate_size").get<int64_t>());
  EXPECT_EQ(c.routed_scaling_factor, j.at("routed_scaling_factor").get<double>());
  EXPECT_EQ(c.swiglu_limit, j.at("swiglu_limit").get<double>());
  EXPECT_EQ(c.norm_topk_prob, j.at("norm_topk_prob").get<bool>());
  EXPECT_EQ(c.index_n_heads, j.at("index_n_heads").get<int64_t>());
  EXPECT_EQ(c.index_head_dim, j.at("index_head_dim").get<int64_t>());
  EXPECT_EQ(c.index_topk, j.at("index_topk").get<int64_t>());
  EXPECT_EQ(c.hc_mult, j.at("hc_mult").get<int64_t>());
  EXPECT_EQ(c.hc_sinkhorn_iters, j.at("hc_sinkhorn_iters").get<int64_t>());
  EXPECT_EQ(c.hc_eps, j.at("hc_eps").get<double>());
  EXPECT_EQ(c.rms_norm_eps, j.at("rms_norm_eps").get<double>());
  EXPECT_EQ(c.max_position_embeddings, j.at("max_position_embeddings").get<int64_t>());
  EXPECT_EQ(c.bos_token_id, j.at("bos_token_id").get<int64_t>());
  EXPECT_EQ(c.eos_token_id, j.at("eos_token_id").get<int64_t>());
  EXPECT_EQ(c.tie_word_embeddings, j.at("tie_word_embeddings").get<bool>());
  ASSERT_EQ(c.layers.size(), size_t(c.num_layers));

  const int64_t L = c.num_layers;
  if (j.contains("compress_ratios")) {
    EXPECT_EQ(c.form, "legacy");
    const json& r = j.at("compress_ratios");
    for (int64_t i = 0; i < L; ++i) {
      EXPECT_EQ(c.layers[size_t(i)].ratio, r[size_t(i)].get<int>()) << "layer " << i;
      EXPECT_EQ(c.layers[size_t(i)].route == RouteKind::Hash, i < j.at("num_hash_layers").get<int64_t>());
    }
    const int64_t tail = int64_t(r.size()) - L;
    EXPECT_EQ(int64_t(c.mtp_layers.size()), std::max(tail, j.at("num_nextn_predict_layers").get<int64_t>()));
    for (int64_t k = 0; k < tail; ++k) EXPECT_EQ(c.mtp_layers[size_t(k)].ratio, r[size_t(L + k)].get<int>());
    EXPECT_EQ(c.rope_main.theta, j.at("rope_theta").get<double>());
    EXPECT_FALSE(c.rope_main.yarn);
    EXPECT_EQ(c.rope_compress.theta, j.at("compress_rope_theta").get<double>());
    const json& ys = j.at("rope_scaling");
    EXPECT_TRUE(c.rope_compress.yarn);
    EXPECT_EQ(c.rope_compress.factor, ys.at("factor").get<double>());
    EXPECT_EQ(c.rope_compress.original_max_position, ys.at("original_max_position_embeddings").get<int64_t>());
    EXPECT_EQ(c.rope_compress.beta_fast, ys.at("beta_fast").get<double>());
    EXPECT_EQ(c.rope_compress.beta_slow, ys.at("beta_slow").get<double>());
  } else {
    EXPECT_EQ(c.form, "transformers");
    const json& rates = j.at("compress_rates");
    for (int64_t i = 0; i < L; ++i) {
      const std::string t = j.at("layer_types")[size_t(i)];
      const LayerSpec& l = c.layers[size_t(i)];
      if (t == "sliding_attention") {
        EXPECT_EQ(l.attn, AttnKind::Sliding);
        EXPECT_EQ(l.ratio, 0);
      } else {
        EXPECT_EQ(l.attn, t == "compressed_sparse_attention" ? AttnKind::CSA : AttnKind::HCA);
        EXPECT_EQ(l.ratio, rates.at(t).get<int>());
      }
      EXPECT_EQ(l.route == RouteKind::Hash, j.at("mlp_layer_types")[size_t(i)] == "hash_moe");
    }
    EXPECT_EQ(int64_t(c.mtp_layers.size()), j.at("num_nextn_predict_layers").get<int64_t>());
    const json& m = j.at("rope_parameters").at("main");
    const json& cp = j.at("rope_parameters").at("compress");
    EXPECT_EQ(c.rope_main.theta, m.at("rope_theta").get<double>());
    EXPECT_EQ(c.rope_main.yarn, m.at("rope_type") == "yarn");
    EXPECT_EQ(c.rope_compress.theta, cp.at("rope_theta").get<double>());
    EXPECT_EQ(c.rope_compress.yarn, cp.at("rope_type") == "yarn");
    EXPECT_EQ(c.rope_compress.factor, cp.at("factor").get<double>());
    EXPECT_EQ(c.rope_compress.original_max_position, cp.at("original_max_position_embeddings").get<int64_t>());
    EXPECT_EQ(c.rope_compress.beta_fast, cp.at("beta_fast").get<double>());
    EXPECT_EQ(c.rope_compress.beta_slow, cp.at("beta_slow").get<double>());
    EXPECT_EQ(c.rope_dim, std::llround(j.at("partial_rotary_factor").get<double>() * double(c.head_dim)));
  }
  for (const LayerSpec& l : c.mtp_layers) EXPECT_EQ(l.route, RouteKind::TopK);
}

struct FixtureCase {
  std::string dir;  // relative to shared/
  std::string form, kinds, routes, mtp_kinds;
  int64_t rope_dim;
};

class ConfigFixtures : public ::testing::TestWithParam<FixtureCase> {};

TEST_P(ConfigFixtures, MatchesJson) {
  REQUIRE_SHARED();
  const FixtureCase& fc = GetParam();
  const std::string dir = test::shared_dir() + "/" + fc.dir;
  const ModelConfig c = load_config(dir);
  EXPECT_EQ(c.source, dir + "/config.json");
  EXPECT_EQ(c.form, fc.form);
  EXPECT_EQ(kinds(c.layers), fc.kinds);
  EXPECT_EQ(routes(c.layers), fc.routes);
  EXPECT_EQ(kinds(c.mtp_layers), fc.mtp_kinds);
  EXPECT_EQ(c.rope_dim, fc.rope_dim);
  EXPECT_EQ(c.rope_main.theta, 10000.0);
  EXPECT_EQ(c.rope_compress.theta, 160000.0);
  EXPECT_TRUE(c.rope_compress.yarn);
  EXPECT_EQ(c.rope_compress.factor, 16.0);
  EXPECT_EQ(c.rope_compress.original_max_position, 65536);
  for (const LayerSpec& l : c.layers)
    EXPECT_EQ(&c.rope_for(l), l.attn == AttnKind::Sliding ? &c.rope_main : &c.rope_compress);
  expect_matches_json(c, read_json(dir + "/config.json"));
  // A path to the file itself gives the same result.
  EXPECT_EQ(kinds(load_config(dir + "/config.json").layers), fc.kinds);
}

INSTANTIATE_TEST_SUITE_P(
    All, ConfigFixtures,
    ::testing::Values(FixtureCase{"fixtures/tiny-a/model", "transformers", "S H16 C4 H16 C4 S", "HHTTTT", "S", 8},
                      FixtureCase{"fixtures/tiny-b/model", "transformers", "H32 H32 C4 H32 C4", "HTTTT", "S", 16},
                      FixtureCase{"fixtures/tiny-q/model", "legacy", "S C4 H16 C4", "HHTT", "S", 64},
                      FixtureCase{"fixtures/tiny-q-wide/model", "legacy", "S C4 H16 C4", "HHTT", "S", 64},
                      FixtureCase{"fixtures/tiny-shakespeare-fp8/model", "legacy", "S S C4 H32 C4 H32", "HHHTTT", "",
                                  64},
                      FixtureCase{"models/tiny-shakespeare", "legacy", "S S C4 H32 C4 H32", "HHHTTT", "", 64}),
    [](const auto& info) {
      std::string n = info.param.dir.substr(info.param.dir.find('/') + 1);
      n = n.substr(0, n.find('/'));
      for (char& ch : n)
        if (ch == '-') ch = '_';
      return n;
    });

TEST(ConfigFixturesSpecific, Values) {
  REQUIRE_SHARED();
  const ModelConfig a = load_config(test::fixture_dir("tiny-a") + "/model");
  EXPECT_EQ(a.hidden_size, 128);
  EXPECT_EQ(a.head_dim, 64);
  EXPECT_EQ(a.index_topk, 4);
  EXPECT_EQ(a.swiglu_limit, 10.0);
  EXPECT_EQ(a.routed_scaling_factor, 1.5);
  const ModelConfig b = load_config(test::fixture_dir("tiny-b") + "/model");
  EXPECT_EQ(b.swiglu_limit, 7.0);
  EXPECT_EQ(b.routed_scaling_factor, 2.5);
  EXPECT_EQ(b.experts_per_tok, 3);
  const ModelConfig q = load_config(test::fixture_dir("tiny-q") + "/model");
  const ModelConfig w = load_config(test::fixture_dir("tiny-q-wide") + "/model");
  EXPECT_EQ(q.index_topk, 8);
  EXPECT_EQ(w.index_topk, 64);
  EXPECT_EQ(q.mtp_layers.size(), 1u);  // from the 5th compress_ratios entry
  const ModelConfig s = load_config(test::shared_dir() + "/models/tiny-shakespeare");
  EXPECT_EQ(s.vocab_size, 1026);
  EXPECT_EQ(s.max_position_embeddings, 65536);
  EXPECT_TRUE(s.mtp_layers.empty());
}

TEST(ConfigRepository, BundledModel) {
  const std::string dir = test::bundled_model_dir();
  if (!std::filesystem::exists(dir + "/config.json")) GTEST_SKIP() << "no bundled model";
  const ModelConfig c = load_config(dir);
  EXPECT_EQ(kinds(c.layers), "S S C4 H32 C4 H32");
  EXPECT_EQ(routes(c.layers), "HHHTTT");
}

TEST(ConfigPublished, FlashLegacy) {
  const json j = test::flash_legacy_config();
  const ModelConfig c = parse_config(j.dump(2), "DeepSeek-V4-Flash/config.json");
  EXPECT_EQ(c.form, "legacy");
  EXPECT_EQ(c.source, "DeepSeek-V4-Flash/config.json");
  EXPECT_EQ(c.num_layers, 43);
  ASSERT_EQ(c.layers.size(), 43u);
  ASSERT_EQ(c.mtp_layers.size(), 1u);
  EXPECT_EQ(c.mtp_layers[0].attn, AttnKind::Sliding);
  EXPECT_EQ(c.mtp_layers[0].route, RouteKind::TopK);
  EXPECT_EQ(kinds({c.layers.begin(), c.layers.begin() + 6}), "S S C4 H128 C4 H128");
  EXPECT_EQ(kinds({c.layers.end() - 2, c.layers.end()}), "H128 C4");
  int n[3] = {};
  for (const LayerSpec& l : c.layers) n[int(l.attn)]++;
  EXPECT_EQ(n[int(AttnKind::Sliding)], 2);
  EXPECT_EQ(n[int(AttnKind::CSA)], 21);
  EXPECT_EQ(n[int(AttnKind::HCA)], 20);
  EXPECT_EQ(routes(c.layers), "HHH" + std::string(40, 'T'));
  EXPECT_EQ(c.rope_dim, 64);
  EXPECT_EQ(c.index_topk, 512);
  EXPECT_EQ(c.rope_compress.factor, 16.0);
  EXPECT_EQ(c.rope_compress.original_max_position, 65536);
  EXPECT_FALSE(c.rope_main.yarn);
  EXPECT_STREQ(attn_kind_name(c.layers[2].attn), "csa");
  expect_matches_json(c, j);
}

TEST(ConfigPublished, ProLegacy) {
  json j = test::flash_legacy_config();
  json ratios = {128, 128};
  for (int i = 2; i < 61; ++i) ratios.push_back(i % 2 == 0 ? 4 : 128);
  ratios.push_back(0);
  j["compress_ratios"] = ratios;
  j["num_hidden_layers"] = 61;
  j["hidden_size"] = 7168;
  j["num_attention_heads"] = 128;
  j["o_groups"] = 16;
  const ModelConfig c = parse_config(j.dump(), "pro/config.json");
  EXPECT_EQ(c.layers.size(), 61u);
  EXPECT_EQ(c.mtp_layers.size(), 1u);
  EXPECT_EQ(kinds({c.layers.begin(), c.layers.begin() + 4}), "H128 H128 C4 H128");
  EXPECT_EQ(c.layers[60].attn, AttnKind::CSA);
}

// Flash-0731: 46 compress_ratios (three DSpark stages) while num_nextn_predict_layers stays 1.
TEST(ConfigPublished, Flash0731DSparkTail) {
  json j = test::flash_legacy_config();
  j["compress_ratios"].push_back(0);
  j["compress_ratios"].push_back(0);
  const ModelConfig c = parse_config(j.dump(), "c.json");
  EXPECT_EQ(c.layers.size(), 43u);
  EXPECT_EQ(kinds(c.mtp_layers), "S S S");
}

TEST(ConfigPublished, NextnBeyondTailDefaultsToSliding) {
  json j = test::flash_legacy_config();
  j["compress_ratios"].erase(43);  // exactly one entry per layer
  j["num_nextn_predict_layers"] = 2;
  EXPECT_EQ(kinds(parse_config(j.dump(), "c.json").mtp_layers), "S S");
  j["num_nextn_predict_layers"] = 0;
  EXPECT_TRUE(parse_config(j.dump(), "c.json").mtp_layers.empty());
}

TEST(ConfigDefaults, OptionalFieldsTakePublishedDefaults) {
  json j = test::flash_legacy_config();
  for (const char* k :
       {"hc_mult", "hc_sinkhorn_iters", "hc_eps", "rms_norm_eps", "n_shared_experts", "routed_scaling_factor",
        "swiglu_limit", "norm_topk_prob", "rope_theta", "compress_rope_theta", "bos_token_id", "eos_token_id",
        "scoring_func", "rope_scaling", "num_nextn_predict_layers", "max_position_embeddings", "tie_word_embeddings"})
    j.erase(k);
  j["compress_ratios"] = json::array();
  for (int i = 0; i < 43; ++i) j["compress_ratios"].push_back(i % 2 ? 0 : 16);  // no CSA: no indexer needed
  for (const char* k : {"index_n_heads", "index_head_dim", "index_topk"}) j.erase(k);
  const ModelConfig c = parse_config(j.dump(), "c.json");
  EXPECT_EQ(c.hc_mult, 4);
  EXPECT_EQ(c.hc_sinkhorn_iters, 20);
  EXPECT_EQ(c.hc_eps, 1e-6);
  EXPECT_EQ(c.rms_norm_eps, 1e-6);
  EXPECT_EQ(c.n_shared_experts, 1);
  EXPECT_EQ(c.routed_scaling_factor, 1.0);
  EXPECT_EQ(c.swiglu_limit, 0.0);
  EXPECT_TRUE(c.norm_topk_prob);
  EXPECT_EQ(c.rope_main.theta, 10000.0);
  EXPECT_EQ(c.rope_compress.theta, 160000.0);
  EXPECT_FALSE(c.rope_compress.yarn);
  EXPECT_EQ(c.bos_token_id, 0);
  EXPECT_EQ(c.eos_token_id, 1);
  EXPECT_EQ(c.index_topk, 0);
  EXPECT_TRUE(c.mtp_layers.empty());
  EXPECT_EQ(kinds({c.layers.begin(), c.layers.begin() + 3}), "H16 S H16");
}

TEST(ConfigTransformers, RopeDimFromFactorAndFallbacks) {
  json j = test::tiny_transformers_config();
  ModelConfig c = parse_config(j.dump(), "t.json");
  EXPECT_EQ(c.form, "transformers");
  EXPECT_EQ(c.rope_dim, 8);
  EXPECT_EQ(kinds(c.layers), "S H16 C4 H16 C4 S");
  EXPECT_TRUE(c.mtp_layers.empty());  // no num_nextn_predict_layers
  // No compress_rates: HF's defaults (4 and 128).
  j.erase("compress_rates");
  EXPECT_EQ(kinds(parse_config(j.dump(), "t.json").layers), "S H128 C4 H128 C4 S");
  // No mlp_layer_types: num_hash_layers decides.
  j.erase("mlp_layer_types");
  j["num_hash_layers"] = 3;
  EXPECT_EQ(routes(parse_config(j.dump(), "t.json").layers), "HHHTTT");
  // No rope_parameters: the legacy keys, then defaults.
  j.erase("rope_parameters");
  j["rope_theta"] = 5000.0;
  c = parse_config(j.dump(), "t.json");
  EXPECT_EQ(c.rope_main.theta, 5000.0);
  EXPECT_EQ(c.rope_compress.theta, 160000.0);
  EXPECT_FALSE(c.rope_compress.yarn);
  // Integers written as floats (as transformers sometimes does) are accepted when exact.
  j["hidden_size"] = 128.0;
  EXPECT_EQ(parse_config(j.dump(), "t.json").hidden_size, 128);
  // A list of eos ids: the first is the model's own.
  j["eos_token_id"] = {7, 9};
  EXPECT_EQ(parse_config(j.dump(), "t.json").eos_token_id, 7);
}

TEST(ConfigLoad, FromFileAndDirectory) {
  test::TempDir tmp;
  tmp.write("config.json", test::flash_legacy_config().dump());
  EXPECT_EQ(load_config(tmp.path().string()).source, tmp.file("config.json"));
  tmp.write("other.json", test::tiny_transformers_config().dump());
  EXPECT_EQ(load_config(tmp.file("other.json")).num_layers, 6);
}

}  // namespace
}  // namespace dsv4
