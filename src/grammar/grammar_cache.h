// Compiled grammars by their source text, over one vocabulary per tokenizer: the entry point of the
// CLI and the server. The mask cache lives in each CompiledGrammar, so a schema that comes back (the
// usual case for an API client) reuses the masks computed for it before. Thread-safe.
#pragma once
#include <cstdint>
#include <functional>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

#include <nlohmann/json.hpp>

#include "grammar/json_schema.h"
#include "grammar/matcher.h"

namespace dsv4 {
class Tokenizer;
}

namespace dsv4::grammar {

class GrammarCache {
 public:
  // The vocabulary (built on first use) covers model_vocab ids; <think> and </think> are never text,
  // ｜DSML｜ is (tool-call blocks). `capacity`: compiled grammars kept (least recently used leave).
  GrammarCache(const Tokenizer& tok, int64_t model_vocab, size_t capacity = 64);

  // Throw UnsupportedSchema for a schema the compiler does not support.
  std::shared_ptr<const CompiledGrammar> json_schema(const nlohmann::ordered_json& schema);
  std::shared_ptr<const CompiledGrammar> json_object();
  // Any grammar, built by `make` on a miss; `key` names it uniquely.
  std::shared_ptr<const CompiledGrammar> get(const std::string& key, const std::function<Grammar()>& make);

  std::shared_ptr<const Vocabulary> vocabulary();

 private:
  const Tokenizer& tok_;
  int64_t model_vocab_;
  size_t capacity_;
  std::mutex mu_;
  std::shared_ptr<const Vocabulary> vocab_;
  std::list<std::string> order_;  // most recent first
  std::unordered_map<std::string, std::pair<std::shared_ptr<const CompiledGrammar>, std::list<std::string>::iterator>> map_;
};

}  // namespace dsv4::grammar
