#include "variant_checkpoint.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <deque>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <regex>
#include <sstream>
#include <vector>

#include "core/dtype.h"
#include "core/error.h"
#include "core/quant.h"
#include "io/config.h"
#include "io/names.h"
#include "io/safetensors.h"
#include "io/weights.h"

namespace dsv4::variants {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

// An editable list of named tensors: views into a source checkpoint, or bytes owned here.
class TensorList {
 public:
  void put(const std::string& name, const TensorView& v) {
    if (auto it = index_.find(name); it != index_.end()) {
      items_[it->second].second = v;
      return;
    }
    index_[name] = items_.size();
    items_.emplace_back(name, v);
  }
  void put(const std::string& name, DType t, Shape shape, std::vector<uint8_t> bytes) {
    store_.push_back(std::move(bytes));
    put(name, TensorView{t, std::move(shape), store_.back().data(), store_.back().size()});
  }
  void put_f32(const std::string& name, Shape shape, const std::vector<float>& v) {
    std::vector<uint8_t> b(v.size() * 4);
    std::memcpy(b.data(), v.data(), b.size());
    put(name, DType::F32, std::move(shape), std::move(b));
  }
  void put_bf16(const std::string& name, Shape shape, const std::vector<float>& v) {
    std::vector<uint8_t> b(v.size() * 2);
    for (size_t i = 0; i < v.size(); ++i) {
      const uint16_t h = f32_to_bf16(v[i]);
      std::memcpy(b.data() + 2 * i, &h, 2);
    }
    put(name, DType::BF16, std::move(shape), std::move(b));
  }
  void erase(const std::string& name) {
    auto it = index_.find(name);
    if (it == index_.end()) return;
    items_.erase(items_.begin() + long(it->second));
    index_.clear();
    for (size_t i = 0; i < items_.size(); ++i) index_[items_[i].first] = i;
  }
  const TensorView* find(const std::string& name) const {
    auto it = index_.find(name);
    return it == index_.end() ? nullptr : &items_[it->second].second;
  }
  const std::vector<std::pair<std::string, TensorView>>& items() const { return items_; }

 private:
  std::vector<std::pair<std::string, TensorView>> items_;
  std::map<std::string, size_t> index_;
  std::deque<std::vector<uint8_t>> store_;
};

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail(path, ": cannot open");
  std::ostringstream os;
  os << in.rdbuf();
  return os.str();
}

json read_config(const std::string& dir) { return json::parse(read_text((fs::path(dir) / "config.json").string())); }

void write_out(const std::string& dst, const json& cfg, const TensorList& ts) {
  fs::create_directories(dst);
  std::ofstream((fs::path(dst) / "config.json").string()) << cfg.dump(1) << "\n";
  write_safetensors((fs::path(dst) / "model.safetensors").string(), ts.items());
}

// The source checkpoint's tensors as views (the Checkpoint keeps the mapping alive).
TensorList list_of(const Checkpoint& ck) {
  TensorList ts;
  for (const TensorEntry* e : ck.all()) ts.put(e->name, e->view);
  return ts;
}

// ---- FP8 e4m3 + E8M0 128x128 quantization of a float matrix ----
struct Fp8Matrix {
  std::vector<uint8_t> codes, scales;
  size_t inexact = 0;
  double max_abs = 0;
};
Fp8Matrix quantize_fp8(const float* w, int64_t out, int64_t in) {
  const int64_t so = (out + 127) / 128, si = (in + 127) / 128;
  Fp8Matrix m;
  m.codes.resize(size_t(out * in));
  m.scales.resize(size_t(so * si));
  for (int64_t bo = 0; bo < so; ++bo)
    for (int64_t bi = 0; bi < si; ++bi) {
      float amax = kFp8AmaxFloor;
      for (int64_t i = bo * 128; i < std::min(out, bo * 128 + 128); ++i)
        for (int64_t k = bi * 128; k < std::min(in, bi * 128 + 128); ++k) amax = std::max(amax, std::fabs(w[i * in + k]));
      const Pow2Scale s = pow2_scale(amax, kFp8MaxInv);
      m.scales[size_t(bo * si + bi)] = s.e8m0;
      for (int64_t i = bo * 128; i < std::min(out, bo * 128 + 128); ++i)
        for (int64_t k = bi * 128; k < std::min(in, bi * 128 + 128); ++k) {
          const float v = w[i * in + k];
          const uint8_t c = f32_to_e4m3(v / s.scale);
          m.codes[size_t(i * in + k)] = c;
          const double d = std::fabs(double(e4m3_to_f32(c)) * s.scale - v);
          m.inexact += d != 0;
          m.max_abs = std::max(m.max_abs, d);
        }
    }
  return m;
}

// ---- MXFP4 codes + E8M0 per 32 from floats (for synth) ----
void quantize_fp4(const std::vector<float>& w, int64_t out, int64_t in, std::vector<uint8_t>& packed,
                  std::vector<uint8_t>& scales) {
  packed.assign(size_t(out * in / 2), 0);
  scales.assign(size_t(out * in / 32), 0);
  for (int64_t i = 0; i < out; ++i)
    for (int64_t b = 0; b < in / 32; ++b) {
      float amax = kFp4AmaxFloor;
      for (int64_t k = b * 32; k < b * 32 + 32; ++k) amax = std::max(amax, std::fabs(w[size_t(i * in + k)]));
      const Pow2Scale s = pow2_scale(amax, kFp4MaxInv);
      scales[size_t(i * (in / 32) + b)] = s.e8m0;
      for (int64_t k = b * 32; k < b * 32 + 32; ++k) {
        const uint8_t c = f32_to_e2m1(w[size_t(i * in + k)] / s.scale);
        packed[size_t((i * in + k) / 2)] |= uint8_t(k % 2 ? c << 4 : c);
      }
    }
}

}  // namespace

// ---------------------------------------------------------------------------------------------------
Report cast_nvfp4(const std::string& src, const std::string& dst) {
  auto ck = Checkpoint::open(src);
  TensorList ts = list_of(*ck);
  json cfg = read_config(src);
  static const std::regex kExpert(R"(^((?:model\.)?layers\.\d+\.ffn\.experts\.\d+\.)w1\.weight$)");
  Report r;
  std::vector<std::string> prefixes;
  for (const auto& [name, v] : ts.items()) {
    std::smatch m;
    if (std::regex_match(name, m, kExpert)) prefixes.push_back(m[1].str());
  }
  for (const std::string& p : prefixes) {
    // w1 and w3 share one global scale (ModelOpt takes the max of their amaxes); w2 has its own.
    for (const std::vector<std::string>& group : {std::vector<std::string>{"w1", "w3"}, std::vector<std::string>{"w2"}}) {
      int kmax = -1000;
      for (const std::string& w : group) {
        const TensorView* s = ts.find(p + w + ".scale");
        const TensorView* q = ts.find(p + w + ".weight");
        if (!s || !q || s->dtype != DType::F8_E8M0 || (q->dtype != DType::I8 && q->dtype != DType::U8))
          fail(src, ": '", p, w, "' is not an MXFP4 expert (I8 weight + F8_E8M0 .scale)");
        for (size_t i = 0; i < s->nbytes; ++i) kmax = std::max(kmax, int(s->data[i]) - 127);
      }
      for (const std::string& w : group) {
        const TensorView s = *ts.find(p + w + ".scale");
        const TensorView q = *ts.find(p + w + ".weight");
        const int64_t out = q.dim(0), in = q.dim(1) * 2;
        std::vector<uint8_t> ws(size_t(out * in / 16));
        for (int64_t i = 0; i < out; ++i)
          for (int64_t j = 0; j < in / 32; ++j) {
            const int e = int(s.data[size_t(i * (in / 32) + j)]) - 127 - kmax + 8;
            uint8_t code = f32_to_e4m3(std::ldexp(1.0f, e));
            if (e < -9) {  // below e4m3's smallest subnormal: lossless only if the block is all zeros
              bool zero = true;
              for (int64_t k = j * 16; k < j * 16 + 16; ++k) zero &= (q.data[size_t(i * in / 2 + k)] & 0x77) == 0;
              if (!zero) fail(src, ": '", p, w, ".scale' row ", i, " block ", j, " is 2^", e - 8,
                              " of the largest scale: not representable in e4m3, no lossless NVFP4 cast");
              code = 0;
            }
            ws[size_t(i * (in / 16) + 2 * j)] = ws[size_t(i * (in / 16) + 2 * j + 1)] = code;
          }
        ts.erase(p + w + ".scale");
        TensorView codes = q;
        codes.dtype = DType::U8;
        ts.put(p + w + ".weight", codes);
        ts.put(p + w + ".weight_scale", DType::F8_E4M3, {out, in / 16}, std::move(ws));
        ts.put_f32(p + w + ".weight_scale_2", {}, {std::ldexp(1.0f, kmax - 8)});
        // No activations to calibrate on: a fixed static scale (amax 8), unused by dsv4 on Hopper.
        ts.put_f32(p + w + ".input_scale", {}, {8.0f / (6.0f * 448.0f)});
        ++r.tensors;
      }
    }
  }
  json& q = cfg["quantization_config"];
  if (!q.is_object()) q = json::object();
  q["moe_quant_algo"] = "NVFP4";
  q["quant_algo"] = "MIXED_PRECISION";
  q["group_size"] = 16;
  q["producer"] = {{"name", "dsv4-variant"}, {"version", "lossless-mxfp4-cast"}};
  q["ignore"] = {"*.attn.*", "*.ffn.shared_experts.*", "head", "mtp.*"};
  write_out(dst, cfg, ts);
  return r;
}

// ---------------------------------------------------------------------------------------------------
Report requant_fp8_experts(const std::string& src, const std::string& dst) {
  const ModelConfig mc = load_config(src);
  auto ck = Checkpoint::open(src);
  const Weights w = bind_weights(mc, *ck);
  TensorList ts = list_of(*ck);
  json cfg = read_config(src);
  Report r;
  std::multimap<std::string, std::string> spelled;  // canonical name -> the checkpoint's spelling
  for (const auto& [name, v] : ts.items()) spelled.emplace(names::canonical(name), name);
  auto convert = [&](const LinearWeight& l) {
    const std::string base = l.name.substr(0, l.name.size() - std::string(".weight").size());
    const Tensor f = dequantize(l);
    Fp8Matrix m = quantize_fp8(f.ptr(), l.out, l.in);
    r.inexact += m.inexact;
    r.max_abs = std::max(r.max_abs, m.max_abs);
    ++r.tensors;
    // The old weight and its scale siblings go, however the checkpoint spelled them; the new ones get
    // the published names.
    for (const char* sib : {".weight", ".scale", ".weight_scale", ".weight_scale_2", ".input_scale"}) {
      auto [lo, hi] = spelled.equal_range(base + sib);
      for (auto it = lo; it != hi; ++it) ts.erase(it->second);
    }
    ts.put(l.name, DType::F8_E4M3, {l.out, l.in}, std::move(m.codes));
    ts.put(base + ".scale", DType::F8_E8M0, {(l.out + 127) / 128, (l.in + 127) / 128}, std::move(m.scales));
  };
  auto block = [&](const BlockWeights& b) {
    for (const ExpertWeights& e : b.ffn.experts)
      for (const LinearWeight* l : {&e.w1, &e.w2, &e.w3}) convert(*l);
  };
  for (const BlockWeights& b : w.layers) block(b);
  for (const MtpWeights& m : w.mtp) block(m.block);
  cfg["expert_dtype"] = "fp8";
  write_out(dst, cfg, ts);
  return r;
}

// ---------------------------------------------------------------------------------------------------
namespace {

// Random tensors of the right kinds, scaled to keep a forward pass finite.
class Synth {
 public:
  Synth(TensorList& ts, uint32_t seed) : ts_(ts), rng_(seed) {}

  std::vector<float> normal(int64_t n, float sd) {
    std::normal_distribution<float> d(0.0f, sd);
    std::vector<float> v(static_cast<size_t>(n));
    for (float& x : v) x = d(rng_);
    return v;
  }
  void f32(const std::string& n, Shape s, float sd) { ts_.put_f32(n, s, normal(numel(s), sd)); }
  void f32_fill(const std::string& n, Shape s, float v) { ts_.put_f32(n, s, std::vector<float>(size_t(numel(s)), v)); }
  void bf16(const std::string& n, Shape s, float sd) { ts_.put_bf16(n, s, normal(numel(s), sd)); }
  void ones(const std::string& n, int64_t d) { ts_.put_bf16(n, {d}, std::vector<float>(size_t(d), 1.0f)); }
  void fp8(const std::string& base, int64_t out, int64_t in) {
    std::vector<float> w = normal(out * in, 1.0f / std::sqrt(float(in)));
    Fp8Matrix m = quantize_fp8(w.data(), out, in);
    ts_.put(base + ".weight", DType::F8_E4M3, {out, in}, std::move(m.codes));
    ts_.put(base + ".scale", DType::F8_E8M0, {(out + 127) / 128, (in + 127) / 128}, std::move(m.scales));
  }
  void fp4(const std::string& base, int64_t out, int64_t in) {
    std::vector<uint8_t> packed, scales;
    quantize_fp4(normal(out * in, 1.0f / std::sqrt(float(in))), out, in, packed, scales);
    ts_.put(base + ".weight", DType::I8, {out, in / 2}, std::move(packed));
    ts_.put(base + ".scale", DType::F8_E8M0, {out, in / 32}, std::move(scales));
  }
  void hc(const std::string& p, int64_t rows, int64_t width, int64_t nscale) {
    f32(p + "_fn", {rows, width}, 0.02f);
    f32(p + "_base", {rows}, 0.1f);
    f32_fill(p + "_scale", {nscale}, 1.0f);
  }
  void compressor(const std::string& p, int64_t ratio, int64_t dc, int64_t c, int64_t D) {
    bf16(p + "wkv.weight", {c * dc, D}, 1.0f / std::sqrt(float(D)));
    bf16(p + "wgate.weight", {c * dc, D}, 1.0f / std::sqrt(float(D)));
    f32(p + "ape", {ratio, c * dc}, 0.1f);
    ones(p + "norm.weight", dc);
  }
  // Every tensor of one decoder block (FORMATS.md 3.3) under prefix p.
  void block(const ModelConfig& cfg, const LayerSpec& spec, const std::string& p) {
    const int64_t D = cfg.hidden_size, n = cfg.hc_mult, H = cfg.num_heads, d = cfg.head_dim, E = cfg.n_routed_experts,
                  I = cfg.moe_inter_dim;
    hc(p + "hc_attn", (2 + n) * n, n * D, 3);
    hc(p + "hc_ffn", (2 + n) * n, n * D, 3);
    ones(p + "attn_norm.weight", D);
    ones(p + "ffn_norm.weight", D);
    fp8(p + "attn.wq_a", cfg.q_lora_rank, D);
    ones(p + "attn.q_norm.weight", cfg.q_lora_rank);
    fp8(p + "attn.wq_b", H * d, cfg.q_lora_rank);
    fp8(p + "attn.wkv", d, D);
    ones(p + "attn.kv_norm.weight", d);
    fp8(p + "attn.wo_a", cfg.o_groups * cfg.o_lora_rank, H * d / cfg.o_groups);
    fp8(p + "attn.wo_b", D, cfg.o_groups * cfg.o_lora_rank);
    f32_fill(p + "attn.attn_sink", {H}, 0.0f);
    if (spec.attn != AttnKind::Sliding)
      compressor(p + "attn.compressor.", spec.ratio, d, spec.attn == AttnKind::CSA ? 2 : 1, D);
    if (spec.attn == AttnKind::CSA) {
      fp8(p + "attn.indexer.wq_b", cfg.index_n_heads * cfg.index_head_dim, cfg.q_lora_rank);
      bf16(p + "attn.indexer.weights_proj.weight", {cfg.index_n_heads, D}, 1.0f / std::sqrt(float(D)));
      compressor(p + "attn.indexer.compressor.", spec.ratio, cfg.index_head_dim, 2, D);
    }
    bf16(p + "ffn.gate.weight", {E, D}, 1.0f / std::sqrt(float(D)));
    if (spec.route == RouteKind::TopK) {
      f32(p + "ffn.gate.bias", {E}, 0.01f);
    } else {  // distinct experts per token
      std::vector<uint8_t> b(size_t(cfg.vocab_size * cfg.experts_per_tok * 8));
      std::vector<int64_t> ids(static_cast<size_t>(E));
      for (int64_t t = 0; t < cfg.vocab_size; ++t) {
        for (int64_t e = 0; e < E; ++e) ids[size_t(e)] = e;
        std::shuffle(ids.begin(), ids.end(), rng_);
        std::memcpy(b.data() + t * cfg.experts_per_tok * 8, ids.data(), size_t(cfg.experts_per_tok * 8));
      }
      ts_.put(p + "ffn.gate.tid2eid", DType::I64, {cfg.vocab_size, cfg.experts_per_tok}, std::move(b));
    }
    for (int64_t e = 0; e < E; ++e) {
      const std::string q = p + "ffn.experts." + std::to_string(e) + ".";
      fp4(q + "w1", I, D);
      fp4(q + "w2", D, I);
      fp4(q + "w3", I, D);
    }
    const int64_t Is = I * cfg.n_shared_experts;
    if (Is > 0) {
      fp8(p + "ffn.shared_experts.w1", Is, D);
      fp8(p + "ffn.shared_experts.w2", D, Is);
      fp8(p + "ffn.shared_experts.w3", Is, D);
    }
  }

 private:
  TensorList& ts_;
  std::mt19937 rng_;
};

}  // namespace

Report add_dspark(const std::string& src, const std::string& dst, int stages, uint32_t seed) {
  const ModelConfig mc = load_config(src);
  if (!mc.mtp_layers.empty()) fail(src, ": add_dspark needs a source without MTP blocks");
  if (stages < 1) fail("add_dspark: stages must be >= 1, got ", stages);
  auto ck = Checkpoint::open(src);
  TensorList ts = list_of(*ck);
  json cfg = read_config(src);
  const int64_t D = mc.hidden_size, R = 16, V = mc.vocab_size;
  const int64_t targets = std::min<int64_t>(3, mc.num_layers);
  Synth s(ts, seed);
  for (int k = 0; k < stages; ++k) {
    const std::string p = names::mtp(k, "");
    LayerSpec spec;  // ratio 0, score routing
    s.block(mc, spec, p);
    if (k == 0) {
      s.fp8(p + "main_proj", D, targets * D);
      s.ones(p + "main_norm.weight", D);
    }
    if (k == stages - 1) {
      s.ones(p + "norm.weight", D);
      s.hc(p + "hc_head", mc.hc_mult, mc.hc_mult * D, 1);
      s.bf16(p + "markov_head.markov_w1.weight", {V, R}, 0.1f);
      s.bf16(p + "markov_head.markov_w2.weight", {V, R}, 0.1f);
      s.bf16(p + "confidence_head.proj.weight", {1, D + R}, 0.05f);
    }
  }
  for (int k = 0; k < stages; ++k) cfg["compress_ratios"].push_back(0);
  cfg["num_nextn_predict_layers"] = 1;  // stale in the published 0731 config too (FORMATS.md 2.3)
  cfg["expert_dtype"] = "fp4";
  cfg["dspark_block_size"] = 5;
  cfg["dspark_noise_token_id"] = V - 1;
  cfg["dspark_markov_rank"] = R;
  json ids = json::array();
  for (int64_t t = mc.num_layers - targets; t < mc.num_layers; ++t) ids.push_back(t);
  cfg["dspark_target_layer_ids"] = ids;
  write_out(dst, cfg, ts);
  return {ts.items().size(), 0, 0};
}

Report synth(const std::string& config_json, const std::string& dst, uint32_t seed) {
  const ModelConfig mc = parse_config(config_json, "synth config");
  TensorList ts;
  Synth s(ts, seed);
  const int64_t D = mc.hidden_size, n = mc.hc_mult, V = mc.vocab_size;
  s.bf16("embed.weight", {V, D}, 1.0f);
  s.bf16("head.weight", {V, D}, 1.0f / std::sqrt(float(D)));
  s.ones("norm.weight", D);
  s.hc("hc_head", n, n * D, 1);
  for (int64_t i = 0; i < mc.num_layers; ++i) s.block(mc, mc.layers[size_t(i)], names::layer(int(i), ""));
  for (size_t k = 0; k < mc.mtp_layers.size(); ++k) {
    const std::string p = names::mtp(int(k), "");
    LayerSpec spec = mc.mtp_layers[k];
    spec.route = RouteKind::TopK;
    s.block(mc, spec, p);
    s.fp8(p + "e_proj", D, D);
    s.fp8(p + "h_proj", D, D);
    for (const char* nm : {"enorm.weight", "hnorm.weight", "norm.weight"}) s.ones(p + nm, D);
    s.hc(p + "hc_head", n, n * D, 1);
  }
  write_out(dst, json::parse(config_json), ts);
  return {ts.items().size(), 0, 0};
}

std::string pro_like_config(int layers) {
  if (layers < 3) fail("pro_like_config: needs >= 3 layers (2 HCA, then CSA), got ", layers);
  json ratios = json::array();
  for (int i = 0; i < layers; ++i) ratios.push_back(i < 2 ? 128 : i % 2 == 0 ? 4 : 128);
  ratios.push_back(0);  // the MTP block
  json c = {
      {"architectures", {"DeepseekV4ForCausalLM"}}, {"model_type", "deepseek_v4"}, {"vocab_size", 512},
      {"hidden_size", 256}, {"num_hidden_layers", layers}, {"num_attention_heads", 16}, {"num_key_value_heads", 1},
      {"head_dim", 128}, {"qk_rope_head_dim", 64}, {"q_lora_rank", 128}, {"o_groups", 2}, {"o_lora_rank", 128},
      {"sliding_window", 32}, {"compress_ratios", ratios}, {"compress_rope_theta", 160000.0}, {"rope_theta", 10000.0},
      {"rope_scaling", {{"type", "yarn"}, {"factor", 16.0}, {"original_max_position_embeddings", 65536},
                        {"beta_fast", 32}, {"beta_slow", 1}}},
      {"max_position_embeddings", 1048576}, {"index_n_heads", 4}, {"index_head_dim", 128}, {"index_topk", 32},
      {"n_routed_experts", 24}, {"n_shared_experts", 1}, {"num_experts_per_tok", 6}, {"moe_intermediate_size", 128},
      {"num_hash_layers", 3}, {"scoring_func", "sqrtsoftplus"}, {"routed_scaling_factor", 2.5},
      {"norm_topk_prob", true}, {"swiglu_limit", 10.0}, {"hc_mult", 4}, {"hc_sinkhorn_iters", 20}, {"hc_eps", 1e-6},
      {"rms_norm_eps", 1e-6}, {"num_nextn_predict_layers", 1}, {"bos_token_id", 0}, {"eos_token_id", 1},
      {"tie_word_embeddings", false}};
  return c.dump(1);
}

}  // namespace dsv4::variants
