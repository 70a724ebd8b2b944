// A grammar bound to a vocabulary (CompiledGrammar, shared and cached) and the per-sequence matcher
// that yields the allowed-token bitmask at each step and advances on the chosen token.
//
// Masks (docs/structured-output.md): a stack's top three positions (the "local" grammar: the rest of
// the innermost three rule bodies) decide most tokens without looking further down. For each such pair,
// computed once per grammar by a walk over the vocabulary trie and cached: the tokens the local
// grammar accepts whole (a bitmask), and the tokens that leave it part-way ("uncertain": id + the byte
// offset where the local grammar ended). At a step the mask is the OR of the cached masks of the
// state's stacks, plus the uncertain tokens whose rest the stack below accepts, plus the end ids
// where the grammar may end.
#pragma once
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "grammar/grammar.h"
#include "grammar/vocabulary.h"

namespace dsv4::grammar {

using TokenMask = std::vector<uint32_t>;  // bit id%32 of word id/32: id allowed

inline bool mask_test(const TokenMask& m, int32_t id) { return (m[size_t(id) >> 5] >> (id & 31)) & 1u; }
inline void mask_set(TokenMask& m, int32_t id) { m[size_t(id) >> 5] |= 1u << (id & 31); }

class CompiledGrammar {
 public:
  CompiledGrammar(Grammar g, std::shared_ptr<const Vocabulary> vocab);
  const Grammar& grammar() const { return g_; }
  const Vocabulary& vocab() const { return *vocab_; }

  struct Entry {
    TokenMask accepted;
    std::vector<std::pair<int32_t, uint32_t>> uncertain;  // (id, offset where the local grammar ended)
  };
  // The cached entry of a stack's top positions (computed on first use). Thread-safe.
  const Entry& entry(const Stack& s) const;
  size_t cached_entries() const;

 private:
  std::unique_ptr<Entry> compute(const Stack& local) const;
  Grammar g_;
  std::shared_ptr<const Vocabulary> vocab_;
  mutable std::mutex mu_;
  mutable std::unordered_map<std::string, std::unique_ptr<Entry>> cache_;  // key: the local positions
};

class Matcher {
 public:
  // end_ids: the tokens that end generation (EOS); allowed exactly where the grammar may end.
  Matcher(std::shared_ptr<const CompiledGrammar> g, std::vector<int32_t> end_ids);

  // The allowed ids of this step into `mask` (resized to the vocabulary's words).
  void fill_mask(TokenMask& mask) const;
  // Advances on `id`; false (state unchanged) when the grammar does not allow it.
  bool accept(int32_t id);
  bool can_end() const { return Grammar::can_end(state_); }
  bool ended() const { return ended_; }  // an end id was accepted

 private:
  std::shared_ptr<const CompiledGrammar> g_;
  std::vector<int32_t> end_ids_;
  State state_;
  bool ended_ = false;
};

}  // namespace dsv4::grammar
