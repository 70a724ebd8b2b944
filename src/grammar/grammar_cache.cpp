#include "grammar/grammar_cache.h"

#include "tokenizer/tokenizer.h"

namespace dsv4::grammar {

GrammarCache::GrammarCache(const Tokenizer& tok, int64_t model_vocab, size_t capacity)
    : tok_(tok), model_vocab_(model_vocab), capacity_(std::max<size_t>(1, capacity)) {}

std::shared_ptr<const Vocabulary> GrammarCache::vocabulary() {
  std::lock_guard<std::mutex> lk(mu_);
  if (!vocab_) {
    VocabularyOptions o;
    o.vocab_size = model_vocab_;
    for (const char* s : {"<think>", "</think>"})
      if (auto id = tok_.token_id(s)) o.exclude.push_back(*id);
    if (auto id = tok_.token_id("｜DSML｜")) o.include_special.push_back(*id);
    vocab_ = Vocabulary::from_tokenizer(tok_, o);
  }
  return vocab_;
}

std::shared_ptr<const CompiledGrammar> GrammarCache::get(const std::string& key, const std::function<Grammar()>& make) {
  {
    std::lock_guard<std::mutex> lk(mu_);
    auto it = map_.find(key);
    if (it != map_.end()) {
      order_.splice(order_.begin(), order_, it->second.second);
      return it->second.first;
    }
  }
  // Outside the lock: compiling, and the masks of the first state (warmed here, on the caller's thread,
  // not on the engine's at the first step), may take a while.
  auto cg = std::make_shared<const CompiledGrammar>(make(), vocabulary());
  TokenMask first;
  Matcher(cg, {}).fill_mask(first);
  std::lock_guard<std::mutex> lk(mu_);
  if (map_.count(key)) return map_[key].first;
  order_.push_front(key);
  map_[key] = {cg, order_.begin()};
  while (map_.size() > capacity_) {
    map_.erase(order_.back());
    order_.pop_back();
  }
  return cg;
}

std::shared_ptr<const CompiledGrammar> GrammarCache::json_schema(const nlohmann::ordered_json& schema) {
  return get("schema:" + schema.dump(), [&] { return json_schema_grammar(schema); });
}

std::shared_ptr<const CompiledGrammar> GrammarCache::json_object() {
  return get("json_object", [] { return json_object_grammar(); });
}

}  // namespace dsv4::grammar
