#include "io/names.h"

#include <regex>
#include <utility>

namespace dsv4::names {
namespace {

bool ends_with(const std::string& s, const std::string& suf) {
  return s.size() >= suf.size() && s.compare(s.size() - suf.size(), suf.size(), suf) == 0;
}
bool starts_with(const std::string& s, const std::string& pre) { return s.rfind(pre, 0) == 0; }

void replace_suffix(std::string& s, const std::string& from, const std::string& to) {
  if (ends_with(s, from)) s = s.substr(0, s.size() - from.size()) + to;
}

}  // namespace

std::string canonical(const std::string& name) {
  std::string n = name;
  if (starts_with(n, "model.")) n = n.substr(6);
  // Whole-name renames (transformers' save_pretrained spelling -> published).
  static const std::pair<const char*, const char*> kWhole[] = {
      {"embed_tokens.weight", "embed.weight"},
      {"lm_head.weight", "head.weight"},
      {"hc_head.hc_fn", "hc_head_fn"},
      {"hc_head.hc_base", "hc_head_base"},
      {"hc_head.hc_scale", "hc_head_scale"},
  };
  for (const auto& [from, to] : kWhole)
    if (n == from) return to;
  replace_suffix(n, ".weight_scale_inv", ".scale");
  replace_suffix(n, ".gate.e_score_correction_bias", ".gate.bias");
  // layers.N.attn.norm.weight is the main attention's kv_norm (not the compressor's norm).
  static const std::regex kAttnNorm(R"(^((?:layers|mtp)\.\d+)\.attn\.norm\.weight$)");
  std::smatch m;
  if (std::regex_match(n, m, kAttnNorm)) return m[1].str() + ".attn.kv_norm.weight";
  return n;
}

std::string layer(int i, const std::string& rest) { return "layers." + std::to_string(i) + "." + rest; }
std::string mtp(int k, const std::string& rest) { return "mtp." + std::to_string(k) + "." + rest; }

}  // namespace dsv4::names
