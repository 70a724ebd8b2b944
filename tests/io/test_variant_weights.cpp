// Expert formats are decided per tensor from the siblings present (FORMATS.md 4.8), and malformed
// variants fail with one-line errors naming the tensor or field: a missing weight_scale_2, a
// weight_scale of the wrong shape, an input_scale of the wrong dtype, DSpark fields without stages.
// The well-formed variants are made at test time by tools/variant-checkpoint from a fixture model.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "io/config.h"
#include "io/safetensors.h"
#include "io/variant.h"
#include "io/weights.h"
#include "model/variant_dirs.h"
#include "variant_checkpoint.h"

namespace dsv4 {
namespace {

namespace fs = std::filesystem;
using Tensors = std::vector<std::pair<std::string, TensorView>>;

const std::string kExpert = "layers.3.ffn.experts.5.w3";  // a routed expert projection of the fixture

class VariantWeights : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!test::have_shared()) GTEST_SKIP() << "shared/fixtures not found";
    src_ = test::fixture_dir("tiny-shakespeare-fp8") + "/model";
    nvfp4_ = dir_.sub("nvfp4");
    variants::cast_nvfp4(src_, nvfp4_);
  }
  // A copy of model directory `from` with its tensor list and config edited.
  std::string edited(const std::string& from, const std::function<void(Tensors&)>& edit,
                     const std::function<void(nlohmann::json&)>& edit_cfg = {}) {
    const std::string out = dir_.sub("edited" + std::to_string(n_++));
    fs::create_directories(out);
    auto f = SafetensorsFile::open(from + "/model.safetensors");
    Tensors ts;
    for (const auto& e : f->tensors()) ts.emplace_back(e.name, e.view);
    edit(ts);
    write_safetensors(out + "/model.safetensors", ts);
    std::ifstream in(from + "/config.json");
    nlohmann::json cfg = nlohmann::json::parse(in);
    if (edit_cfg) edit_cfg(cfg);
    std::ofstream(out + "/config.json") << cfg.dump();
    return out;
  }
  static Weights bind(const std::string& dir, std::unique_ptr<Checkpoint>& keep) {
    const ModelConfig cfg = load_config(dir);
    keep = Checkpoint::open(dir);
    return bind_weights(cfg, *keep);
  }
  // The one-line message binding `dir` throws ("" when it binds).
  static std::string bind_error(const std::string& dir) {
    try {
      std::unique_ptr<Checkpoint> keep;
      bind(dir, keep);
    } catch (const Error& e) {
      EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos) << "one line: " << e.what();
      return e.what();
    }
    return "";
  }
  static TensorView* find(Tensors& ts, const std::string& name) {
    for (auto& [n, v] : ts)
      if (n == name) return &v;
    ADD_FAILURE() << "no tensor " << name;
    static TensorView none;
    return &none;
  }
  static void drop(Tensors& ts, const std::string& name) {
    std::erase_if(ts, [&](const auto& t) { return t.first == name; });
  }

  test::VariantDir dir_;
  std::string src_, nvfp4_;
  int n_ = 0;
};

TEST_F(VariantWeights, NvFp4DecidedPerTensorAndDequantizedExactly) {
  std::unique_ptr<Checkpoint> ka, kb;
  const Weights a = bind(src_, ka), b = bind(nvfp4_, kb);
  for (size_t l = 0; l < a.layers.size(); ++l) {
    EXPECT_EQ(expert_format(a.layers[l]), WeightFormat::FP4);
    EXPECT_EQ(expert_format(b.layers[l]), WeightFormat::NVFP4) << "layer " << l;
    // Shared experts and attention keep DeepSeek's FP8 (ModelOpt's ignore list).
    EXPECT_EQ(b.layers[l].ffn.shared.w1.format, WeightFormat::FP8);
    EXPECT_EQ(b.layers[l].attn.wq_a.format, WeightFormat::FP8);
    for (size_t e = 0; e < a.layers[l].ffn.experts.size(); ++e) {
      const ExpertWeights &x = a.layers[l].ffn.experts[e], &y = b.layers[l].ffn.experts[e];
      EXPECT_TRUE(w13_share_global_scale(y));
      ASSERT_TRUE(y.w2.input_scale.data);
      for (auto [p, q] : {std::pair{&x.w1, &y.w1}, {&x.w2, &y.w2}, {&x.w3, &y.w3}})
        ASSERT_EQ(dequantize(*q).data, dequantize(*p).data) << q->name;
    }
  }
  EXPECT_NE(variant_name(load_config(nvfp4_), b).find("NVFP4"), std::string::npos);
}

// The formula e2m1 x e4m3(weight_scale[i, k/16]) x weight_scale_2, checked element by element on a
// tensor whose global scale is not a power of two (a calibrated export, not the lossless cast).
TEST_F(VariantWeights, NvFp4DequantFormula) {
  const float g = 0.3f;
  const std::string dir = edited(nvfp4_, [&](Tensors& ts) {
    *find(ts, kExpert + ".weight_scale_2") = TensorView{DType::F32, {}, reinterpret_cast<const uint8_t*>(&g), 4};
  });
  std::unique_ptr<Checkpoint> keep;
  const Weights w = bind(dir, keep);
  const LinearWeight& l = w.layers[3].ffn.experts[5].w3;
  ASSERT_EQ(l.format, WeightFormat::NVFP4);
  const Tensor d = dequantize(l);
  for (int64_t i = 0; i < l.out; i += 7)
    for (int64_t k = 0; k < l.in; ++k) {
      const float code = e2m1_to_f32(e2m1_code_at(l.weight.data, size_t(i * l.in + k)));
      const float ws = e4m3_to_f32(l.scale.data[size_t(i * (l.in / 16) + k / 16)]);
      ASSERT_EQ(d.data[size_t(i * l.in + k)], code * (ws * g)) << i << "," << k;
    }
  EXPECT_FALSE(w13_share_global_scale(w.layers[3].ffn.experts[5]));
}

TEST_F(VariantWeights, MissingWeightScale2) {
  const std::string err = bind_error(edited(nvfp4_, [](Tensors& ts) { drop(ts, kExpert + ".weight_scale_2"); }));
  EXPECT_NE(err.find("'" + kExpert + ".weight'"), std::string::npos) << err;
  EXPECT_NE(err.find("'" + kExpert + ".weight_scale_2' is missing"), std::string::npos) << err;
}

TEST_F(VariantWeights, WeightScaleOfWrongShape) {
  const std::string err = bind_error(edited(nvfp4_, [](Tensors& ts) {
    TensorView* v = find(ts, kExpert + ".weight_scale");
    v->shape = {v->shape[0] * 2, v->shape[1] / 2};  // same bytes, per-32 layout
  }));
  EXPECT_NE(err.find("'" + kExpert + ".weight_scale'"), std::string::npos) << err;
  EXPECT_NE(err.find("expected [128, 16]"), std::string::npos) << err;
}

TEST_F(VariantWeights, InputScaleOfWrongDtype) {
  static const uint16_t bf16_one[2] = {0x3f80, 0x3f80};
  const std::string err = bind_error(edited(nvfp4_, [](Tensors& ts) {
    *find(ts, kExpert + ".input_scale") = TensorView{DType::BF16, {}, reinterpret_cast<const uint8_t*>(bf16_one), 2};
  }));
  EXPECT_NE(err.find("'" + kExpert + ".input_scale'"), std::string::npos) << err;
  EXPECT_NE(err.find("dtype BF16, expected F32"), std::string::npos) << err;
}

TEST_F(VariantWeights, InputScaleIsOptional) {
  EXPECT_EQ(bind_error(edited(nvfp4_, [](Tensors& ts) { drop(ts, kExpert + ".input_scale"); })), "");
}

TEST_F(VariantWeights, BadGlobalScaleValue) {
  static const float zero = 0.0f;
  const std::string err = bind_error(edited(nvfp4_, [](Tensors& ts) {
    *find(ts, kExpert + ".weight_scale_2") = TensorView{DType::F32, {}, reinterpret_cast<const uint8_t*>(&zero), 4};
  }));
  EXPECT_NE(err.find("weight_scale_2 = 0, expected a positive finite number"), std::string::npos) << err;
}

// Exporters write the per-tensor scalars 0-d or as [1]; both hold one element. Two elements is an error.
TEST_F(VariantWeights, GlobalScaleAsOneElementVector) {
  static const float g[2] = {0.5f, 0.5f};
  const auto as = [](Shape shape, size_t bytes) {
    return [shape, bytes](Tensors& ts) {
      *find(ts, kExpert + ".weight_scale_2") = TensorView{DType::F32, shape, reinterpret_cast<const uint8_t*>(g), bytes};
    };
  };
  EXPECT_EQ(bind_error(edited(nvfp4_, as({1}, 4))), "");
  const std::string err = bind_error(edited(nvfp4_, as({2}, 8)));
  EXPECT_NE(err.find(kExpert + ".weight_scale_2"), std::string::npos) << err;
  EXPECT_NE(err.find("expected 1 elements"), std::string::npos) << err;
}

TEST_F(VariantWeights, BothScaleKindsAreAmbiguous) {
  const std::string err = bind_error(edited(nvfp4_, [&](Tensors& ts) {
    auto f = SafetensorsFile::open(src_ + "/model.safetensors");
    static std::vector<uint8_t> keep;
    for (const auto& e : f->tensors())
      if (e.name == kExpert + ".scale") {
        keep.assign(e.view.data, e.view.data + e.view.nbytes);
        TensorView v = e.view;
        v.data = keep.data();
        ts.emplace_back(e.name, v);
      }
  }));
  EXPECT_NE(err.find("the format is ambiguous"), std::string::npos) << err;
}

// ModelOpt's FP8 per-tensor scheme (e4m3 weight + f32 weight_scale) is not a format dsv4 reads.
TEST_F(VariantWeights, UnrecognisedFormatIsNamed) {
  const std::string err = bind_error(edited(src_, [](Tensors& ts) {
    static const float one = 1.0f;
    const std::string w = "layers.2.attn.wq_a";
    drop(ts, w + ".scale");
    ts.emplace_back(w + ".weight_scale", TensorView{DType::F32, {}, reinterpret_cast<const uint8_t*>(&one), 4});
  }));
  EXPECT_NE(err.find("'layers.2.attn.wq_a.weight'"), std::string::npos) << err;
  EXPECT_NE(err.find("dtype F8_E4M3 with ModelOpt '.weight_scale' siblings: not a format dsv4 reads"), std::string::npos)
      << err;
}

TEST_F(VariantWeights, DSparkStagesBind) {
  const std::string dir = dir_.sub("dspark");
  variants::add_dspark(src_, dir, 3, 7);
  std::unique_ptr<Checkpoint> keep;
  const Weights w = bind(dir, keep);
  const ModelConfig cfg = load_config(dir);
  EXPECT_EQ(cfg.layers.size(), 6u);
  EXPECT_EQ(cfg.mtp_layers.size(), 3u);  // the three trailing zeros of compress_ratios
  EXPECT_EQ(cfg.dspark.target_layer_ids, (std::vector<int64_t>{3, 4, 5}));
  EXPECT_EQ(cfg.expert_dtype, "fp4");
  ASSERT_EQ(w.dspark.size(), 3u);
  EXPECT_TRUE(w.mtp.empty());
  EXPECT_TRUE(w.unused.empty()) << w.unused.front();
  EXPECT_TRUE(w.dspark[0].main_proj.present());
  EXPECT_FALSE(w.dspark[1].main_proj.present());
  EXPECT_TRUE(w.dspark[2].markov_w2.present());
  EXPECT_NE(variant_name(cfg, w).find("3 DSpark stage(s)"), std::string::npos);
}

TEST_F(VariantWeights, DSparkFieldWithoutItsStages) {
  const std::string err = bind_error(edited(src_, [](Tensors&) {}, [](nlohmann::json& c) {
    c["dspark_block_size"] = 5;
    c["dspark_noise_token_id"] = 7;
    c["dspark_markov_rank"] = 16;
    c["dspark_target_layer_ids"] = {3, 4, 5};
  }));
  EXPECT_NE(err.find("config.json: field 'dspark_block_size' is set"), std::string::npos) << err;
  EXPECT_NE(err.find("'mtp.0.main_proj.weight' is missing"), std::string::npos) << err;
}

TEST_F(VariantWeights, DSparkStagesWithoutTheirFields) {
  const std::string dir = dir_.sub("dspark");
  variants::add_dspark(src_, dir, 3, 7);
  const std::string err = bind_error(edited(dir, [](Tensors&) {}, [](nlohmann::json& c) { c.erase("dspark_block_size"); }));
  EXPECT_NE(err.find("field 'dspark_noise_token_id' is set but 'dspark_block_size' is missing"), std::string::npos)
      << err;
  const std::string err2 = bind_error(edited(dir, [](Tensors&) {}, [](nlohmann::json& c) {
    for (const char* k : {"dspark_block_size", "dspark_noise_token_id", "dspark_markov_rank", "dspark_target_layer_ids"})
      c.erase(k);
  }));
  EXPECT_NE(err2.find("holds DSpark stage tensors ('mtp.0.main_proj.weight') but the config has no dspark_* fields"),
            std::string::npos)
      << err2;
}

}  // namespace
}  // namespace dsv4
