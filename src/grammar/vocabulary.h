// The model's vocabulary as the grammar matcher sees it: each id's bytes, and a trie over them built
// once per tokenizer and shared by every grammar (docs/structured-output.md "How masks are computed").
//
// Ids with no bytes (special tokens, ids past the tokenizer, excluded ids) are never allowed by a
// grammar; the matcher allows the end ids (EOS) separately, where the grammar may end.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace dsv4 {
class Tokenizer;
}

namespace dsv4::grammar {

struct VocabularyOptions {
  int64_t vocab_size = 0;                // the model's (the mask's) size; 0: the tokenizer's
  std::vector<int32_t> exclude;          // ids never produced as text (e.g. <think>, </think>)
  std::vector<int32_t> include_special;  // special tokens matched by their content (e.g. ｜DSML｜)
};

class Vocabulary {
 public:
  // token_bytes[id]: the bytes of id (empty: never allowed).
  explicit Vocabulary(std::vector<std::string> token_bytes);
  static std::shared_ptr<const Vocabulary> from_tokenizer(const Tokenizer& tok, const VocabularyOptions& opt = {});

  int64_t size() const { return int64_t(bytes_.size()); }
  const std::string& bytes(int32_t id) const { return bytes_[size_t(id)]; }

  // The trie: node 0 is the root (the empty prefix). A node's subtree holds the ids sorted[lo, hi)
  // (ids sorted by their bytes); those ending exactly at the node are sorted[lo, end). Its children
  // are nodes[first, first + count), each reached by one more byte.
  struct Node {
    uint32_t lo = 0, hi = 0, end = 0;
    uint32_t first = 0, count = 0;
    uint8_t byte = 0;
  };
  const std::vector<Node>& nodes() const { return nodes_; }
  const std::vector<int32_t>& sorted() const { return sorted_; }

 private:
  void build(uint32_t node, uint32_t depth);
  std::vector<std::string> bytes_;
  std::vector<int32_t> sorted_;
  std::vector<Node> nodes_;
};

}  // namespace dsv4::grammar
