// Shared pieces of the grammar tests: the bundled tokenizer's vocabulary, and whole-text checks.
#pragma once
#include <memory>
#include <random>
#include <string>

#include "grammar/json_schema.h"
#include "grammar/matcher.h"
#include "grammar/vocabulary.h"
#include "support/test_paths.h"
#include "tokenizer/tokenizer.h"

namespace dsv4::test {

inline const Tokenizer& tiny_tokenizer() {
  static const Tokenizer t = Tokenizer::load(bundled_model_dir());
  return t;
}

inline std::shared_ptr<const grammar::Vocabulary> tiny_vocab() {
  static const auto v = [] {
    const Tokenizer& t = tiny_tokenizer();
    grammar::VocabularyOptions o;
    for (const char* s : {"<think>", "</think>"})
      if (auto id = t.token_id(s)) o.exclude.push_back(*id);
    return grammar::Vocabulary::from_tokenizer(t, o);
  }();
  return v;
}

// Whether the grammar accepts exactly `text` (a complete parse).
inline bool accepts(const grammar::Grammar& g, const std::string& text) {
  grammar::State st = g.initial();
  return g.advance_bytes(st, text) && grammar::Grammar::can_end(st);
}

inline bool schema_accepts(const nlohmann::ordered_json& schema, const std::string& text) {
  return accepts(grammar::json_schema_grammar(schema), text);
}

}  // namespace dsv4::test
