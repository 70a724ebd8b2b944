// The name table and the Weights binding: published names and their variants load to the same model;
// a missing tensor, a wrong shape, a wrong dtype or a missing FP8 scale is a one-line error naming the
// file, the tensor and what was expected.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <functional>
#include <map>
#include <random>

#include "core/error.h"
#include "io/names.h"
#include "model/golden.h"
#include "model/model.h"

namespace dsv4 {
namespace {

namespace fs = std::filesystem;

TEST(Names, CanonicalVariants) {
  EXPECT_EQ(names::canonical("model.embed_tokens.weight"), "embed.weight");
  EXPECT_EQ(names::canonical("lm_head.weight"), "head.weight");
  EXPECT_EQ(names::canonical("model.hc_head.hc_fn"), "hc_head_fn");
  EXPECT_EQ(names::canonical("layers.3.attn.wq_a.weight_scale_inv"), "layers.3.attn.wq_a.scale");
  EXPECT_EQ(names::canonical("model.layers.3.ffn.gate.e_score_correction_bias"), "layers.3.ffn.gate.bias");
  EXPECT_EQ(names::canonical("layers.7.attn.norm.weight"), "layers.7.attn.kv_norm.weight");
  // The compressor's norm is not the kv_norm.
  EXPECT_EQ(names::canonical("layers.7.attn.compressor.norm.weight"), "layers.7.attn.compressor.norm.weight");
  EXPECT_EQ(names::canonical("layers.0.attn.wq_a.weight"), "layers.0.attn.wq_a.weight");
}

// Rewrites a fixture model with an edit applied to its tensor list, into a fresh temp directory.
class EditedModel : public ::testing::Test {
 protected:
  using Edit = std::function<void(std::vector<std::pair<std::string, TensorView>>&)>;
  void SetUp() override {
    if (!test::have_shared()) GTEST_SKIP() << "shared/fixtures not found";
    dir_ = fs::temp_directory_path() / ("dsv4-weights-" + std::to_string(std::random_device{}()));
    fs::create_directories(dir_);
  }
  void TearDown() override {
    if (!dir_.empty()) fs::remove_all(dir_);
  }
  std::string make(const std::string& fixture, const Edit& edit) {
    const std::string src = test::fixture_dir(fixture) + "/model";
    fs::copy_file(src + "/config.json", dir_ / "config.json", fs::copy_options::overwrite_existing);
    auto f = SafetensorsFile::open(src + "/model.safetensors");
    std::vector<std::pair<std::string, TensorView>> ts;
    for (const auto& e : f->tensors()) ts.emplace_back(e.name, e.view);
    edit(ts);
    write_safetensors((dir_ / "model.safetensors").string(), ts);
    return dir_.string();
  }
  // The message of the Error that loading `dir` throws ("" when it loads).
  static std::string load_error(const std::string& dir) {
    try {
      Model::load(dir, Numerics::Reference);
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  }
  fs::path dir_;
};

TEST_F(EditedModel, MissingTensor) {
  auto dir = make("tiny-q", [](auto& ts) {
    std::erase_if(ts, [](auto& t) { return t.first == "layers.1.attn.wkv.weight"; });
  });
  std::string err = load_error(dir);
  EXPECT_NE(err.find("model.safetensors"), std::string::npos) << err;
  EXPECT_NE(err.find("'layers.1.attn.wkv.weight' is missing"), std::string::npos) << err;
  EXPECT_EQ(err.find('\n'), std::string::npos) << "one line: " << err;
}

TEST_F(EditedModel, WrongShape) {
  std::vector<float> bogus(512 * 255);
  auto dir = make("tiny-a", [&](auto& ts) {
    for (auto& [name, v] : ts)
      if (name == "embed.weight") v = TensorView{DType::F32, {512, 255}, (const uint8_t*)bogus.data(), bogus.size() * 4};
  });
  std::string err = load_error(dir);
  EXPECT_NE(err.find("'embed.weight'"), std::string::npos) << err;
  EXPECT_NE(err.find("shape [512, 255], expected [512, 128]"), std::string::npos) << err;
}

TEST_F(EditedModel, WrongDtype) {
  auto dir = make("tiny-q", [](auto& ts) {
    for (auto& [name, v] : ts)
      if (name == "layers.0.hc_attn_base") {  // f32 [24] reinterpreted as bf16 [48]... keep the shape, change dtype
        v.dtype = DType::I32;
      }
  });
  std::string err = load_error(dir);
  EXPECT_NE(err.find("'layers.0.hc_attn_base'"), std::string::npos) << err;
  EXPECT_NE(err.find("dtype I32, expected F32"), std::string::npos) << err;
}

TEST_F(EditedModel, Fp8WithoutScale) {
  auto dir = make("tiny-q", [](auto& ts) {
    std::erase_if(ts, [](auto& t) { return t.first == "layers.2.attn.wq_b.scale"; });
  });
  std::string err = load_error(dir);
  EXPECT_NE(err.find("'layers.2.attn.wq_b.weight'"), std::string::npos) << err;
  EXPECT_NE(err.find("'layers.2.attn.wq_b.scale' is missing"), std::string::npos) << err;
}

TEST_F(EditedModel, WrongScaleShape) {
  auto dir = make("tiny-q", [](auto& ts) {
    for (auto& [name, v] : ts)
      if (name == "layers.0.ffn.experts.3.w2.scale") v.shape = {128, 16};  // same bytes, wrong layout
  });
  std::string err = load_error(dir);
  EXPECT_NE(err.find("'layers.0.ffn.experts.3.w2.scale'"), std::string::npos) << err;
  EXPECT_NE(err.find("expected [256, 8]"), std::string::npos) << err;
}

// A hash layer's token -> expert table with an entry that names no expert fails at load, naming the
// file, the tensor (so the layer) and the entry, not at the first token that happens to hit it.
TEST_F(EditedModel, CorruptTid2eidNamesFileAndLayer) {
  std::vector<int64_t> table;  // tiny-q's tables are I64 [512, 2]
  auto dir = make("tiny-q", [&](auto& ts) {
    for (auto& [name, v] : ts)
      if (name == "layers.1.ffn.gate.tid2eid" && v.dtype == DType::I64) {
        table.resize(size_t(v.numel()));
        std::memcpy(table.data(), v.data, v.nbytes);
        table[size_t(7 * v.shape[1] + 1)] = 1000;  // token 7, second choice
        v.data = reinterpret_cast<const uint8_t*>(table.data());
      }
  });
  ASSERT_FALSE(table.empty()) << "tiny-q has no tid2eid in layer 1";
  const std::string err = load_error(dir);
  EXPECT_EQ(err, dir + "/model.safetensors: tensor 'layers.1.ffn.gate.tid2eid': entry [7, 1] is 1000, expected an "
                       "expert id 0..7") << err;
}

// A config that says fewer layers than the checkpoint holds is refused (it used to run on the first
// layers only, silently).
TEST_F(EditedModel, FewerConfigLayersThanTheCheckpoint) {
  auto dir = make("tiny-q", [](auto&) {});
  std::ifstream in(dir + "/config.json");
  std::string cfg((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const std::string was = "\"num_hidden_layers\": 4";
  const size_t at = cfg.find(was);
  ASSERT_NE(at, std::string::npos);
  cfg.replace(at, was.size(), "\"num_hidden_layers\": 3");
  std::ofstream(dir + "/config.json") << cfg;
  const std::string err = load_error(dir);
  EXPECT_EQ(err, dir + "/config.json: num_hidden_layers is 3, but " + dir +
                     "/model.safetensors holds tensor 'layers.3.attn.attn_sink' of a later layer (the config and the "
                     "checkpoint disagree)") << err;
}

// transformers-style and FP8-quantizer spellings load and give exactly the same logits.
TEST_F(EditedModel, VariantNamesGiveSameModel) {
  auto rename = [](const std::string& n) -> std::string {
    if (n == "embed.weight") return "model.embed_tokens.weight";
    if (n == "hc_head_fn") return "model.hc_head.hc_fn";
    if (n.size() > 6 && n.compare(n.size() - 6, 6, ".scale") == 0 && n.find("hc_") == std::string::npos)
      return "model." + n.substr(0, n.size() - 6) + ".weight_scale_inv";
    if (n.find(".ffn.gate.bias") != std::string::npos)
      return n.substr(0, n.size() - 4) + "e_score_correction_bias";
    if (n.find(".attn.kv_norm.weight") != std::string::npos)
      return n.substr(0, n.find(".kv_norm")) + ".norm.weight";
    return n;
  };
  auto dir = make("tiny-q", [&](auto& ts) {
    for (auto& [name, v] : ts) name = rename(name);
  });
  auto a = Model::load(dir, Numerics::Reference);
  auto b = Model::load(test::fixture_dir("tiny-q") + "/model", Numerics::Reference);
  const std::vector<int32_t> ids = {5, 17, 300, 2, 99, 41, 7, 8, 9, 10, 11, 12, 13};
  Sequence sa(*a), sb(*b);
  EXPECT_EQ(sa.forward(ids).data, sb.forward(ids).data);
  EXPECT_EQ(a->num_mtp(), 1u);
}

TEST_F(EditedModel, TokenOutsideVocabulary) {
  auto m = Model::load(test::fixture_dir("tiny-a") + "/model", Numerics::Reference);
  Sequence st(*m);
  try {
    st.forward({1, 2, 512});
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("token id 512 is outside the vocabulary [0, 512)"), std::string::npos);
  }
}

}  // namespace
}  // namespace dsv4
