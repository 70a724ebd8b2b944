// config.json -> ModelConfig (FORMATS.md §2). The same facts come spelled two ways: the published
// legacy form (compress_ratios, num_hash_layers, qk_rope_head_dim, rope_scaling) and the transformers
// form (layer_types, compress_rates, mlp_layer_types, partial_rotary_factor, rope_parameters). Both are
// folded here into one typed struct, so nothing downstream ever looks at a JSON key, and everything the
// engine relies on is validated once, with a message naming the field.
#include "io/config.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>

#include "core/error.h"
#include "io/json_text.h"

namespace dsv4 {

const char* attn_kind_name(AttnKind k) {
  switch (k) {
    case AttnKind::Sliding: return "sliding";
    case AttnKind::CSA: return "csa";
    case AttnKind::HCA: return "hca";
  }
  return "?";
}

namespace {

using json = nlohmann::json;
namespace fs = std::filesystem;

constexpr int64_t kMaxI64 = std::numeric_limits<int64_t>::max();
// MTP / DSpark blocks: the published models have 1 or 3; the bound only keeps a corrupt count from
// allocating gigabytes.
constexpr int64_t kMaxMtpLayers = 1024;

using json_text::printable;
std::string dump(const json& j) { return json_text::excerpt(j, 60); }

// "nothing (the field is missing)", "null", "string \"abc\"", "number 2.5", ...
std::string describe(const json* j) {
  if (!j) return "nothing (the field is missing)";
  if (j->is_null()) return "null";
  return cat(j->type_name(), ' ', dump(*j));
}

bool as_int(const json& j, int64_t* out) {
  if (j.is_number_unsigned()) {
    if (j.get<uint64_t>() > uint64_t(kMaxI64)) return false;
    *out = int64_t(j.get<uint64_t>());
    return true;
  }
  if (j.is_number_integer()) {
    *out = j.get<int64_t>();
    return true;
  }
  if (j.is_number_float()) {  // transformers writes some integers as 65536.0
    double d = j.get<double>();
    if (std::trunc(d) != d || std::fabs(d) >= 9.0e18) return false;
    *out = int64_t(d);
    return true;
  }
  return false;
}

// Typed access to the fields of one JSON object; every failure reads
// "<file>: field '<prefix><key>': expected <what>, found <value>".
class Fields {
 public:
  Fields(const json& obj, const std::string& source, std::string prefix = "")
      : obj_(obj), source_(source), prefix_(std::move(prefix)) {}

  const std::string& source() const { return source_; }
  std::string name(const std::string& key) const { return prefix_ + key; }

  // The stored value, null included; nullptr when the key is absent.
  const json* raw(const std::string& key) const {
    auto it = obj_.find(key);
    return it == obj_.end() ? nullptr : &*it;
  }
  // The value, or nullptr when absent or null (HF writes null for "use the default").
  const json* get(const std::string& key) const {
    const json* v = raw(key);
    return v && !v->is_null() ? v : nullptr;
  }

  [[noreturn]] void bad(const std::string& key, const std::string& expected, const json* found) const {
    fail(source_, ": field '", name(key), "': expected ", expected, ", found ", describe(found));
  }

  // An integer in [lo, hi]; `def` when absent (required when def is empty).
  int64_t integer(const std::string& key, std::optional<int64_t> def, int64_t lo = 1, int64_t hi = kMaxI64) const {
    const json* v = get(key);
    std::string what = lo == 1 && hi == kMaxI64   ? "a positive integer"
                       : lo == 0 && hi == kMaxI64 ? "a non-negative integer"
                                                  : cat("an integer in [", lo, ", ", hi, "]");
    if (!v) {
      if (def) return *def;
      bad(key, what, raw(key));
    }
    int64_t x;
    if (!as_int(*v, &x) || x < lo || x > hi) bad(key, what, v);
    return x;
  }

  double number(const std::string& key, std::optional<double> def, bool positive) const {
    const json* v = get(key);
    const char* what = positive ? "a positive number" : "a non-negative number";
    if (!v) {
      if (def) return *def;
      bad(key, what, raw(key));
    }
    if (!v->is_number()) bad(key, what, v);
    double x = v->get<double>();
    if (!std::isfinite(x) || x < 0 || (positive && x == 0)) bad(key, what, v);
    return x;
  }

  bool boolean(const std::string& key, bool def) const {
    const json* v = get(key);
    if (!v) return def;
    if (!v->is_boolean()) bad(key, "true or false", v);
    return v->get<bool>();
  }

  std::optional<std::string> string(const std::string& key) const {
    const json* v = get(key);
    if (!v) return std::nullopt;
    if (!v->is_string()) bad(key, "a string", v);
    return v->get<std::string>();
  }

  // Optional string field that must equal `expected` when present (a value the engine cannot honour).
  void expect_string(const std::string& key, const std::string& expected) const {
    if (auto s = string(key); s && *s != expected) bad(key, cat('"', expected, '"'), get(key));
  }

  const json* object(const std::string& key) const {
    const json* v = get(key);
    if (v && !v->is_object()) bad(key, "an object", v);
    return v;
  }
  const json* array(const std::string& key, const char* what) const {
    const json* v = get(key);
    if (v && !v->is_array()) bad(key, what, v);
    return v;
  }

 private:
  const json& obj_;
  const std::string& source_;
  std::string prefix_;
};

bool is_hca_ratio(int64_t r) { return r >= 8 && r <= (int64_t(1) << 30) && (r & (r - 1)) == 0; }

// Legacy compress ratio -> layer kind: 0 sliding, 4 CSA (overlapping compressor + indexer), a power of
// two >= 8 HCA. Anything else (V4.1's 1 and 2 included) is a different architecture.
LayerSpec layer_from_ratio(const json& v, size_t i, const std::string& source) {
  int64_t r;
  if (!as_int(v, &r) || !(r == 0 || r == 4 || is_hca_ratio(r)))
    fail(source, ": compress_ratios[", i, "] = ", dump(v),
         ": expected 0 (sliding), 4 (CSA) or a power of two >= 8 (HCA)");
  LayerSpec s;
  s.ratio = int(r);
  s.attn = r == 0 ? AttnKind::Sliding : r == 4 ? AttnKind::CSA : AttnKind::HCA;
  return s;
}

// One rope block: rope_parameters.main / .compress (rope_type) or the legacy rope_scaling (type).
RopeConfig parse_rope(const Fields& r, double default_theta, int64_t max_position, const char* type_key,
                      const char* default_type) {
  RopeConfig rc;
  rc.theta = r.number("rope_theta", default_theta, true);
  std::optional<std::string> type = r.string(type_key);
  if (!type && !default_type) r.bad(type_key, "\"yarn\" or \"default\"", r.raw(type_key));
  const std::string t = type ? *type : default_type;
  if (t == "default") return rc;
  if (t != "yarn") r.bad(type_key, "\"yarn\" or \"default\" (the only rope types DeepSeek-V4 uses)", r.get(type_key));
  rc.yarn = true;
  rc.factor = r.number("factor", std::nullopt, true);
  // HF falls back to max_position_embeddings when the YaRN block does not name its original length.
  rc.original_max_position = r.integer("original_max_position_embeddings",
                                       max_position > 0 ? std::optional<int64_t>(max_position) : std::nullopt);
  rc.beta_fast = r.number("beta_fast", 32.0, true);
  rc.beta_slow = r.number("beta_slow", 1.0, true);
  // The reference does not scale cos/sin by the YaRN mscale (HF pins attention_factor to 1.0 for that
  // reason, FORMATS.md §2.5); any other value would describe numerics the engine does not implement.
  if (const json* af = r.get("attention_factor"); af && !(af->is_number() && af->get<double>() == 1.0))
    r.bad("attention_factor", "1.0 (the reference applies no YaRN attention scaling)", af);
  return rc;
}

// rope_dim: qk_rope_head_dim if given, else round(partial_rotary_factor * head_dim). Every place that
// states it must agree, since the engine has one rope width for all layers.
int64_t parse_rope_dim(const Fields& f, int64_t head_dim) {
  struct Source {
    std::string field;
    int64_t dim;
  };
  std::vector<Source> found;
  if (f.get("qk_rope_head_dim")) found.push_back({"qk_rope_head_dim", f.integer("qk_rope_head_dim", std::nullopt)});
  auto from_factor = [&](const Fields& g) {
    if (!g.get("partial_rotary_factor")) return;
    double p = g.number("partial_rotary_factor", std::nullopt, true);
    if (p > 1.0) g.bad("partial_rotary_factor", "a number in (0, 1]", g.get("partial_rotary_factor"));
    found.push_back({g.name("partial_rotary_factor"), std::llround(p * double(head_dim))});
  };
  from_factor(f);
  if (const json* rp = f.object("rope_parameters"))
    for (const char* part : {"main", "compress"})
      if (auto it = rp->find(part); it != rp->end() && it->is_object())
        from_factor(Fields(*it, f.source(), cat("rope_parameters.", part, '.')));
  if (found.empty()) f.bad("qk_rope_head_dim", "a positive integer (or 'partial_rotary_factor')", nullptr);
  for (const Source& s : found)
    if (s.dim != found[0].dim)
      fail(f.source(), ": field '", s.field, "' gives a rope dim of ", s.dim, " but '", found[0].field, "' gives ",
           found[0].dim);
  const int64_t d = found[0].dim;
  if (d <= 0 || d % 2 != 0 || d > head_dim)
    fail(f.source(), ": field '", found[0].field,
         "': expected a rope dim that is even, positive and <= head_dim = ", head_dim, ", found ", d);
  return d;
}

// Published form: one compress ratio per layer (then per MTP block), the number of hash-routed layers.
void parse_legacy_layers(const Fields& f, ModelConfig& c) {
  const json& ratios = *f.get("compress_ratios");
  if (!ratios.is_array()) f.bad("compress_ratios", "a list of per-layer compress ratios", &ratios);
  if (ratios.size() < size_t(c.num_layers))
    fail(f.source(), ": field 'compress_ratios': expected at least num_hidden_layers = ", c.num_layers,
         " entries (one per layer, then one per MTP block), found ", ratios.size());
  for (size_t i = 0; i < ratios.size(); ++i)
    (i < size_t(c.num_layers) ? c.layers : c.mtp_layers).push_back(layer_from_ratio(ratios[i], i, f.source()));
  const int64_t n_hash = f.integer("num_hash_layers", std::nullopt, 0, c.num_layers);
  for (int64_t i = 0; i < c.num_layers; ++i) c.layers[size_t(i)].route = i < n_hash ? RouteKind::Hash : RouteKind::TopK;
}

// Transformers form: layer_types strings with ratios from compress_rates, mlp_layer_types strings.
void parse_transformers_layers(const Fields& f, ModelConfig& c) {
  int64_t csa = 4, hca = 128;  // HF defaults
  if (const json* cr = f.object("compress_rates")) {
    Fields r(*cr, f.source(), "compress_rates.");
    csa = r.integer("compressed_sparse_attention", 4);
    if (csa != 4)
      r.bad("compressed_sparse_attention", "4 (the overlapping CSA compressor)", r.get("compressed_sparse_attention"));
    hca = r.integer("heavily_compressed_attention", 128);
    if (!is_hca_ratio(hca))
      r.bad("heavily_compressed_attention", "a power of two >= 8", r.get("heavily_compressed_attention"));
  }
  const json& types = *f.get("layer_types");
  if (!types.is_array()) f.bad("layer_types", "a list of per-layer attention types", &types);
  if (types.size() != size_t(c.num_layers))
    fail(f.source(), ": field 'layer_types': expected num_hidden_layers = ", c.num_layers, " entries, found ",
         types.size());
  for (size_t i = 0; i < types.size(); ++i) {
    const json& t = types[i];
    LayerSpec s;
    if (t == "sliding_attention") {
      s.attn = AttnKind::Sliding;
    } else if (t == "compressed_sparse_attention") {
      s.attn = AttnKind::CSA;
      s.ratio = int(csa);
    } else if (t == "heavily_compressed_attention") {
      s.attn = AttnKind::HCA;
      s.ratio = int(hca);
    } else {
      fail(f.source(), ": layer_types[", i, "] = ", dump(t),
           ": expected \"sliding_attention\", \"compressed_sparse_attention\" or \"heavily_compressed_attention\"");
    }
    c.layers.push_back(s);
  }
  if (const json* mlp = f.array("mlp_layer_types", "a list of per-layer MoE types")) {
    if (mlp->size() != size_t(c.num_layers))
      fail(f.source(), ": field 'mlp_layer_types': expected num_hidden_layers = ", c.num_layers, " entries, found ",
           mlp->size());
    for (size_t i = 0; i < mlp->size(); ++i) {
      const json& t = (*mlp)[i];
      if (t == "hash_moe")
        c.layers[i].route = RouteKind::Hash;
      else if (t == "moe")
        c.layers[i].route = RouteKind::TopK;
      else
        fail(f.source(), ": mlp_layer_types[", i, "] = ", dump(t), ": expected \"hash_moe\" or \"moe\"");
    }
  } else {
    const int64_t n_hash = f.integer("num_hash_layers", std::nullopt, 0, c.num_layers);
    for (int64_t i = 0; i < c.num_layers; ++i)
      c.layers[size_t(i)].route = i < n_hash ? RouteKind::Hash : RouteKind::TopK;
  }
}

// Fields that name a checkpoint variant (FORMATS.md 1, 2.3, 4.8): expert_dtype, dspark_*, and the
// ModelOpt moe_quant_algo. The DSpark fields come as a set; their stages are checked against the
// checkpoint when the weights are bound.
void parse_variant_fields(const Fields& f, ModelConfig& c) {
  if (auto d = f.string("expert_dtype")) {
    if (*d != "fp4" && *d != "fp8") f.bad("expert_dtype", "\"fp4\" or \"fp8\"", f.get("expert_dtype"));
    c.expert_dtype = *d;
  }
  if (const json* q = f.object("quantization_config")) {
    Fields qf(*q, f.source(), "quantization_config.");
    if (auto a = qf.string("moe_quant_algo")) c.moe_quant_algo = *a;
  }
  static const char* kDSpark[] = {"dspark_block_size", "dspark_noise_token_id", "dspark_target_layer_ids",
                                  "dspark_markov_rank"};
  const char* any = nullptr;
  for (const char* k : kDSpark)
    if (f.get(k)) any = any ? any : k;
  if (!any) return;
  for (const char* k : kDSpark)
    if (!f.get(k)) fail(f.source(), ": field '", any, "' is set but '", k, "' is missing (DSpark fields come as a set)");
  DSparkConfig& d = c.dspark;
  d.block_size = f.integer("dspark_block_size", std::nullopt);
  d.noise_token_id = f.integer("dspark_noise_token_id", std::nullopt, 0, c.vocab_size - 1);
  d.markov_rank = f.integer("dspark_markov_rank", std::nullopt);
  const json& t = *f.array("dspark_target_layer_ids", "a list of main-layer ids");
  for (size_t i = 0; i < t.size(); ++i) {
    int64_t id;
    if (!as_int(t[i], &id) || id < 0 || id >= c.num_layers)
      fail(f.source(), ": dspark_target_layer_ids[", i, "] = ", dump(t[i]), ": expected a layer id in [0, ",
           c.num_layers, ")");
    d.target_layer_ids.push_back(id);
  }
  if (d.target_layer_ids.empty()) f.bad("dspark_target_layer_ids", "a non-empty list of main-layer ids", &t);
}

ModelConfig parse_object(const json& j, const std::string& source) {
  if (!j.is_object()) fail(source, ": expected a JSON object, found ", describe(&j));
  const Fields f(j, source);
  ModelConfig c;
  c.source = source;

  c.vocab_size = f.integer("vocab_size", std::nullopt);
  c.hidden_size = f.integer("hidden_size", std::nullopt);
  c.num_layers = f.integer("num_hidden_layers", std::nullopt);
  c.num_heads = f.integer("num_attention_heads", std::nullopt);
  c.head_dim = f.integer("head_dim", std::nullopt);
  c.q_lora_rank = f.integer("q_lora_rank", std::nullopt);
  c.o_groups = f.integer("o_groups", std::nullopt);
  if (c.num_heads % c.o_groups != 0)
    f.bad("o_groups", cat("a divisor of num_attention_heads = ", c.num_heads), f.get("o_groups"));
  c.o_lora_rank = f.integer("o_lora_rank", std::nullopt);
  c.sliding_window = f.integer("sliding_window", std::nullopt);
  // One shared K=V latent head (MQA); anything else is not this architecture.
  if (f.get("num_key_value_heads") && f.integer("num_key_value_heads", std::nullopt) != 1)
    f.bad("num_key_value_heads", "1 (DeepSeek-V4 shares one K=V head)", f.get("num_key_value_heads"));

  c.n_routed_experts = f.integer("n_routed_experts", std::nullopt);
  c.experts_per_tok = f.integer("num_experts_per_tok", std::nullopt, 1, c.n_routed_experts);
  c.moe_inter_dim = f.integer("moe_intermediate_size", std::nullopt);
  c.n_shared_experts = f.integer("n_shared_experts", 1, 0);
  c.routed_scaling_factor = f.number("routed_scaling_factor", 1.0, true);
  c.swiglu_limit = f.number("swiglu_limit", 0.0, false);
  c.norm_topk_prob = f.boolean("norm_topk_prob", true);
  f.expect_string("scoring_func", "sqrtsoftplus");
  f.expect_string("hidden_act", "silu");

  c.hc_mult = f.integer("hc_mult", 4);
  c.hc_sinkhorn_iters = f.integer("hc_sinkhorn_iters", 20, 0);
  c.hc_eps = f.number("hc_eps", 1e-6, true);
  c.rms_norm_eps = f.number("rms_norm_eps", 1e-6, true);

  c.max_position_embeddings = f.integer("max_position_embeddings", 0, 0);
  c.bos_token_id = f.integer("bos_token_id", 0, 0);
  if (const json* eos = f.get("eos_token_id"); eos && eos->is_array()) {
    // generation configs list several stop ids; the first is the model's own end-of-sequence token
    if (eos->empty() || !as_int((*eos)[0], &c.eos_token_id) || c.eos_token_id < 0)
      f.bad("eos_token_id", "a non-negative integer or a non-empty list of them", eos);
  } else {
    c.eos_token_id = f.integer("eos_token_id", 1, 0);
  }
  c.tie_word_embeddings = f.boolean("tie_word_embeddings", false);

  // Layer description: the transformers form wins when both are present (HF has already folded the
  // legacy keys into it).
  if (f.get("layer_types")) {
    c.form = "transformers";
    parse_transformers_layers(f, c);
  } else if (f.get("compress_ratios")) {
    c.form = "legacy";
    parse_legacy_layers(f, c);
  } else {
    f.bad("compress_ratios", "a list of per-layer compress ratios (or 'layer_types' in the transformers form)",
          f.raw("compress_ratios"));
  }
  // MTP blocks: the compress_ratios tail describes them; num_nextn_predict_layers may count more
  // (stale in Flash-0731, FORMATS.md §2.3) or fewer; extra ones default to plain sliding attention.
  const int64_t nextn = f.integer("num_nextn_predict_layers", 0, 0, kMaxMtpLayers);
  if (int64_t(c.mtp_layers.size()) > kMaxMtpLayers)
    fail(source, ": field 'compress_ratios': more than ", kMaxMtpLayers, " entries beyond num_hidden_layers");
  while (int64_t(c.mtp_layers.size()) < nextn) c.mtp_layers.push_back(LayerSpec{});
  for (LayerSpec& m : c.mtp_layers) m.route = RouteKind::TopK;

  parse_variant_fields(f, c);

  c.rope_dim = parse_rope_dim(f, c.head_dim);
  const double theta = f.number("rope_theta", 10000.0, true);
  const double compress_theta = f.number("compress_rope_theta", 160000.0, true);
  const json* rp = f.object("rope_parameters");
  const json* main_rope = rp ? Fields(*rp, source, "rope_parameters.").object("main") : nullptr;
  const json* compress_rope = rp ? Fields(*rp, source, "rope_parameters.").object("compress") : nullptr;
  if (rp && !main_rope && !compress_rope)
    f.bad("rope_parameters", "an object with 'main' and 'compress' rope blocks", rp);
  c.rope_main = main_rope ? parse_rope(Fields(*main_rope, source, "rope_parameters.main."), theta,
                                       c.max_position_embeddings, "rope_type", "default")
                          : RopeConfig{theta};
  if (compress_rope) {
    c.rope_compress = parse_rope(Fields(*compress_rope, source, "rope_parameters.compress."), compress_theta,
                                 c.max_position_embeddings, "rope_type", "default");
  } else if (const json* rs = f.object("rope_scaling")) {
    // Legacy: the YaRN block applies to the compressed layers only, with compress_rope_theta as base.
    Fields r(*rs, source, "rope_scaling.");
    c.rope_compress =
        parse_rope(r, compress_theta, c.max_position_embeddings, r.get("rope_type") ? "rope_type" : "type", nullptr);
    c.rope_compress.theta = compress_theta;
  } else {
    c.rope_compress = RopeConfig{compress_theta};
  }

  // The lightning indexer exists only in CSA layers; its sizes are required exactly when one does.
  const bool any_csa =
      std::any_of(c.layers.begin(), c.layers.end(), [](const LayerSpec& l) { return l.attn == AttnKind::CSA; }) ||
      std::any_of(c.mtp_layers.begin(), c.mtp_layers.end(), [](const LayerSpec& l) { return l.attn == AttnKind::CSA; });
  const std::optional<int64_t> idx_def = any_csa ? std::nullopt : std::optional<int64_t>(0);
  c.index_n_heads = f.integer("index_n_heads", idx_def);
  c.index_head_dim = f.integer("index_head_dim", idx_def);
  c.index_topk = f.integer("index_topk", idx_def);
  if (any_csa && c.index_head_dim < c.rope_dim)
    f.bad("index_head_dim", cat("an integer >= the rope dim ", c.rope_dim, " (indexer heads rotate too)"),
          f.get("index_head_dim"));
  return c;
}

}  // namespace

ModelConfig parse_config(const std::string& text, const std::string& source) {
  // nlohmann treats a NUL byte as the end of the input, which would silently drop whatever follows.
  if (size_t nul = text.find('\0'); nul != std::string::npos)
    fail(source, ": malformed JSON at byte ", nul, ": NUL byte");
  json j;
  try {
    j = json::parse(text);
  } catch (const json::parse_error& e) {
    fail(source, ": malformed JSON at byte ", e.byte, ": ", json_text::reason(e));
  } catch (const json::exception& e) {  // e.g. a number too large for a double
    fail(source, ": malformed JSON: ", json_text::reason(e));
  }
  try {
    return parse_object(j, source);
  } catch (const json::exception& e) {
    // Every access above checks types first; this only turns a missed case into the documented error type.
    fail(source, ": unexpected JSON content: ", json_text::reason(e));
  }
}

ModelConfig load_config(const std::string& path) {
  std::error_code ec;
  const bool dir = fs::is_directory(path, ec);
  const std::string file = dir ? (fs::path(path) / "config.json").string() : path;
  std::ifstream in(file, std::ios::binary);
  if (!in) fail(path, dir ? ": cannot open config.json (" : ": cannot open (", std::strerror(errno), ")");
  std::ostringstream os;
  os << in.rdbuf();
  if (in.bad()) fail(file, ": read error (", std::strerror(errno), ")");
  return parse_config(os.str(), file);
}

LayerSpec ModelConfig::layer_at(int64_t i) const {
  if (i < 0) fail("layer ", i, " does not exist");
  if (i < num_layers) return layers.at(size_t(i));
  const size_t k = size_t(i - num_layers);
  LayerSpec spec = k < mtp_layers.size() ? mtp_layers[k] : LayerSpec{};
  spec.route = RouteKind::TopK;  // MTP blocks never hash-route
  return spec;
}

}  // namespace dsv4
