// Added tokens (special tokens such as <｜User｜> and plain added tokens such as <think>): matched by
// exact content in the raw text before pre-tokenization, leftmost match first and, among matches that
// start at the same byte, the longest one, like Hugging Face's added vocabulary. Tokens with
// normalized=false are split out first, then those with normalized=true in the remaining text (there is
// no normalizer here, so only the order differs). lstrip / rstrip absorb adjacent ASCII whitespace;
// single_word requires non-word characters (ASCII letters, digits, '_') on both sides.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

namespace dsv4::tok {

struct AddedToken {
  int32_t id = -1;
  std::string content;
  bool special = false;
  bool normalized = false;
  bool lstrip = false, rstrip = false, single_word = false;
};

class AddedTokenMatcher {
 public:
  AddedTokenMatcher() = default;
  explicit AddedTokenMatcher(const std::vector<AddedToken>& tokens);

  // Splits `text` into runs of ordinary text (id < 0) and added tokens (their id), in order, calling
  // emit(piece, id) for each non-empty piece.
  void split(std::string_view text, const std::function<void(std::string_view, int32_t)>& emit) const;

 private:
  // A byte trie over the token contents of one pass.
  struct Trie {
    struct Node {
      std::vector<std::pair<uint8_t, int32_t>> next;  // sorted by byte
      int32_t token = -1;                               // index into tokens_ of a token ending here
    };
    std::vector<Node> nodes{Node{}};
    bool first[256] = {};
    void insert(std::string_view s, int32_t token);
    // Longest token starting at text[i]: its index and length, or -1.
    int32_t longest_at(std::string_view text, size_t i, size_t* len) const;
  };
  void split_pass(const Trie& trie, std::string_view text,
                  const std::function<void(std::string_view, int32_t)>& emit) const;

  std::vector<AddedToken> tokens_;
  Trie raw_, normalized_;
  bool any_normalized_ = false;
};

}  // namespace dsv4::tok
