// Reading tokenizer.json / tokenizer_config.json into Tokenizer::Impl, validating as it goes.
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "tokenizer/byte_level.h"
#include "tokenizer/tokenizer_impl.h"

namespace dsv4 {
namespace {

using nlohmann::json;

std::string read_file(const std::filesystem::path& p) {
  std::ifstream f(p, std::ios::binary);
  if (!f) fail(p.string(), ": cannot open");
  std::ostringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

json parse_json(std::string_view text, const std::string& name) {
  try {
    return json::parse(text);
  } catch (const json::exception& e) {
    fail(name, ": malformed JSON: ", e.what());
  }
}

bool flag(const json& obj, const char* key, const std::string& where) {
  if (!obj.contains(key) || obj[key].is_null()) return false;
  if (!obj[key].is_boolean()) fail(where, ".", key, ": expected true or false");
  return obj[key].get<bool>();
}

// "<token>" or {"content": "<token>", ...} or null.
std::optional<std::string> config_token(const json& cfg, const char* key, const std::string& name) {
  if (!cfg.contains(key) || cfg[key].is_null()) return std::nullopt;
  const json& v = cfg[key];
  if (v.is_string()) return v.get<std::string>();
  if (v.is_object() && v.contains("content") && v["content"].is_string()) return v["content"].get<std::string>();
  fail(name, ": ", key, ": expected a string or an object with \"content\"");
}

std::vector<tok::AddedToken> read_added_tokens(const json& j, const std::string& name) {
  std::vector<tok::AddedToken> out;
  if (j.is_null()) return out;
  if (!j.is_array()) fail(name, ": added_tokens: expected an array");
  for (size_t i = 0; i < j.size(); ++i) {
    const json& t = j[i];
    std::string where = cat(name, ": added_tokens[", i, "]");
    if (!t.is_object() || !t.contains("id") || !t["id"].is_number_integer() || !t.contains("content") ||
        !t["content"].is_string())
      fail(where, ": expected an object with an integer \"id\" and a string \"content\"");
    tok::AddedToken a;
    int64_t id = t["id"].get<int64_t>();
    if (id < 0 || id > INT32_MAX) fail(where, ".id: ", id, " is out of range");
    a.id = int32_t(id);
    a.content = t["content"].get<std::string>();
    if (a.content.empty()) fail(where, ".content: empty");
    a.special = flag(t, "special", where);
    a.normalized = flag(t, "normalized", where);
    a.lstrip = flag(t, "lstrip", where);
    a.rstrip = flag(t, "rstrip", where);
    a.single_word = flag(t, "single_word", where);
    out.push_back(std::move(a));
  }
  return out;
}

void check_normalizer(const json& n, const std::string& name) {
  if (n.is_null()) return;
  if (n.is_object() && n.value("type", "") == "Sequence" && n.contains("normalizers") &&
      n["normalizers"].is_array() && n["normalizers"].empty())
    return;
  fail(name, ": normalizer: unsupported normalizer ", n.is_object() ? n.value("type", "?") : n.dump(),
       " (only none is supported)");
}

void check_decoder(const json& d, const std::string& name) {
  if (d.is_object() && d.value("type", "") == "ByteLevel") return;
  fail(name, ": decoder: unsupported decoder ", d.is_object() ? "\"" + d.value("type", "?") + "\"" : d.dump(),
       " (only ByteLevel is supported)");
}

// One merge as its two parts, from "a b" or ["a", "b"].
std::pair<std::string, std::string> merge_parts(const json& m, const std::string& where) {
  if (m.is_string()) {
    const std::string s = m.get<std::string>();
    size_t sp = s.find(' ');
    if (sp == std::string::npos || sp == 0 || sp + 1 == s.size() || s.find(' ', sp + 1) != std::string::npos)
      fail(where, ": expected \"LEFT RIGHT\", got \"", s, "\"");
    return {s.substr(0, sp), s.substr(sp + 1)};
  }
  if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string())
    return {m[0].get<std::string>(), m[1].get<std::string>()};
  fail(where, ": expected \"LEFT RIGHT\" or [\"LEFT\", \"RIGHT\"]");
}

}  // namespace

Tokenizer Tokenizer::load(const std::filesystem::path& dir) {
  const auto tj = dir / "tokenizer.json";
  const auto cj = dir / "tokenizer_config.json";
  if (!std::filesystem::exists(tj)) fail(tj.string(), ": not found");
  std::string cfg = std::filesystem::exists(cj) ? read_file(cj) : std::string();
  return from_json(read_file(tj), cfg, tj.string());
}

Tokenizer Tokenizer::from_json(std::string_view tokenizer_json, std::string_view config_json, const std::string& name) {
  try {
    return from_json_checked(tokenizer_json, config_json, name);
  } catch (const json::exception& e) {
    fail(name, ": unexpected JSON content: ", e.what());  // a field of the wrong type
  }
}

Tokenizer Tokenizer::from_json_checked(std::string_view tokenizer_json, std::string_view config_json,
                                       const std::string& name) {
  const json root = parse_json(tokenizer_json, name);
  if (!root.is_object()) fail(name, ": expected a JSON object at the top level");
  auto impl = std::make_unique<Impl>();

  // Model.
  const json& model = root.contains("model") ? root["model"] : json();
  if (!model.is_object()) fail(name, ": model: missing or not an object");
  const std::string type = model.value("type", "");
  if (type != "BPE") fail(name, ": model.type: unsupported model type \"", type, "\" (only BPE is supported)");
  for (const char* k : {"continuing_subword_prefix", "end_of_word_suffix"})
    if (model.contains(k) && !model[k].is_null() && !(model[k].is_string() && model[k].get<std::string>().empty()))
      fail(name, ": model.", k, ": not supported");
  if (!model.contains("vocab") || !model["vocab"].is_object()) fail(name, ": model.vocab: missing or not an object");
  if (!model.contains("merges") || !model["merges"].is_array()) fail(name, ": model.merges: missing or not an array");

  const std::vector<tok::AddedToken> added = read_added_tokens(root.value("added_tokens", json()), name);
  check_normalizer(root.value("normalizer", json()), name);
  impl->pre = tok::PreTokenizer::from_json(root.value("pre_tokenizer", json()), name);
  if (!impl->pre.has_byte_level())
    fail(name, ": pre_tokenizer: no ByteLevel step (only byte-level BPE tokenizers are supported)");
  check_decoder(root.value("decoder", json()), name);

  // Vocabulary: the file's strings are in the byte-level alphabet.
  tok::StringIdMap by_symbols;  // as written in the file, for the merges
  tok::StringIdMap by_bytes;    // raw bytes, for encoding
  int64_t max_id = -1;
  for (const auto& [key, val] : model["vocab"].items()) {
    if (!val.is_number_integer() || val.get<int64_t>() < 0 || val.get<int64_t>() > INT32_MAX)
      fail(name, ": model.vocab[\"", key, "\"]: expected a non-negative integer id");
    int32_t id = val.get<int32_t>();
    by_symbols.emplace(key, id);
    max_id = std::max<int64_t>(max_id, id);
  }
  for (const auto& a : added) max_id = std::max<int64_t>(max_id, a.id);
  if (max_id < 0) fail(name, ": model.vocab: empty");
  impl->text.assign(size_t(max_id + 1), std::string());
  impl->kind.assign(size_t(max_id + 1), Impl::kNone);
  for (const auto& [key, id] : by_symbols) {
    auto bytes = tok::symbols_to_bytes(key);
    // Like the Hugging Face ByteLevel decoder, a string outside the alphabet stands for itself.
    impl->text[size_t(id)] = bytes ? *bytes : key;
    impl->kind[size_t(id)] = Impl::kVocab;
    if (bytes) by_bytes.emplace(std::move(*bytes), id);
  }

  // Merges.
  const json& merges = model["merges"];
  std::vector<tok::BpeModel::Merge> ranked;
  ranked.reserve(merges.size());
  for (size_t i = 0; i < merges.size(); ++i) {
    std::string where = cat(name, ": model.merges[", i, "]");
    auto [l, r] = merge_parts(merges[i], where);
    auto li = by_symbols.find(l), ri = by_symbols.find(r), mi = by_symbols.find(l + r);
    if (li == by_symbols.end()) fail(where, ": \"", l, "\" is not in the vocabulary");
    if (ri == by_symbols.end()) fail(where, ": \"", r, "\" is not in the vocabulary");
    if (mi == by_symbols.end()) fail(where, ": merged token \"", l + r, "\" is not in the vocabulary");
    ranked.push_back({li->second, ri->second, mi->second});
  }
  bool ignore_merges = model.contains("ignore_merges") && model["ignore_merges"].is_boolean() &&
                       model["ignore_merges"].get<bool>();
  impl->bpe = std::make_unique<tok::BpeModel>(std::move(by_bytes), ranked, ignore_merges);

  // Added tokens override the vocabulary's text for their ids.
  for (const auto& a : added) {
    impl->text[size_t(a.id)] = a.content;
    impl->kind[size_t(a.id)] = a.special ? Impl::kSpecial : Impl::kAdded;
    impl->added_by_content.emplace(a.content, a.id);
  }
  impl->added = tok::AddedTokenMatcher(added);

  Tokenizer t(std::move(impl));
  if (!config_json.empty()) {
    // Name the config file next to the tokenizer file in messages.
    std::string cname = name;
    const std::string suffix = "tokenizer.json";
    if (cname.size() >= suffix.size() && cname.compare(cname.size() - suffix.size(), suffix.size(), suffix) == 0)
      cname.replace(cname.size() - suffix.size(), suffix.size(), "tokenizer_config.json");
    else
      cname += " (tokenizer_config.json)";
    const json cfg = parse_json(config_json, cname);
    if (!cfg.is_object()) fail(cname, ": expected a JSON object");
    auto resolve = [&](const char* key) -> std::optional<int32_t> {
      auto content = config_token(cfg, key, cname);
      if (!content) return std::nullopt;
      auto id = t.token_id(*content);
      if (!id) fail(cname, ": ", key, " \"", *content, "\" is not a token of ", name);
      return id;
    };
    t.impl_->bos = resolve("bos_token");
    t.impl_->eos = resolve("eos_token");
    t.impl_->pad = resolve("pad_token");
  }
  return t;
}

}  // namespace dsv4
