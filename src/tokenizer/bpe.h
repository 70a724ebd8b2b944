// Byte-level BPE: a vocabulary of byte strings with ids and a ranked list of merges. A pre-token is
// split into single bytes, then the lowest-ranked adjacent pair is merged repeatedly (leftmost first
// among equal ranks) with a priority queue over a linked list of symbols: O(n log n) in the
// pre-token's length, so a 100k-character run stays fast. Results for short pre-tokens are cached.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace dsv4::tok {

// Transparent string hash so the maps can be probed with a string_view.
struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};
using StringIdMap = std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>>;

class BpeModel {
 public:
  struct Merge {
    int32_t left, right, result;  // token ids of the pair and of the merged token
  };

  // `vocab`: raw byte string -> id (entries that are not byte strings left out); `merges` in rank order
  // (rank = index). `ignore_merges`: a pre-token that is itself in the vocabulary becomes that token
  // directly.
  BpeModel(StringIdMap vocab, const std::vector<Merge>& merges, bool ignore_merges);
  ~BpeModel();

  // Appends the ids of one pre-token (raw bytes). Bytes without a vocabulary entry are dropped (the
  // model has no unknown token), as Hugging Face does.
  void encode(std::string_view piece, std::vector<int32_t>& out) const;

  const StringIdMap& vocab() const { return vocab_; }

 private:
  void merge_all(std::string_view piece, std::vector<int32_t>& out) const;

  StringIdMap vocab_;
  int32_t byte_id_[256];
  std::unordered_map<uint64_t, std::pair<int32_t, int32_t>> merges_;  // (left<<32|right) -> (rank, new id)
  bool ignore_merges_ = false;
  struct Cache;
  std::unique_ptr<Cache> cache_;
};

}  // namespace dsv4::tok
