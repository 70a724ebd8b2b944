#include "grammar/vocabulary.h"

#include <algorithm>

#include "core/error.h"
#include "tokenizer/tokenizer.h"

namespace dsv4::grammar {

Vocabulary::Vocabulary(std::vector<std::string> token_bytes) : bytes_(std::move(token_bytes)) {
  for (size_t i = 0; i < bytes_.size(); ++i)
    if (!bytes_[i].empty()) sorted_.push_back(int32_t(i));
  std::sort(sorted_.begin(), sorted_.end(), [&](int32_t a, int32_t b) {
    return bytes_[size_t(a)] != bytes_[size_t(b)] ? bytes_[size_t(a)] < bytes_[size_t(b)] : a < b;
  });
  nodes_.push_back(Node{0, uint32_t(sorted_.size()), 0, 0, 0, 0});
  build(0, 0);
}

// Children of a node are allocated together (contiguous), then each is built in turn.
void Vocabulary::build(uint32_t node, uint32_t depth) {
  uint32_t i = nodes_[node].lo;
  const uint32_t hi = nodes_[node].hi;
  while (i < hi && bytes_[size_t(sorted_[i])].size() == depth) ++i;
  nodes_[node].end = i;
  const uint32_t first = uint32_t(nodes_.size());
  while (i < hi) {
    const uint8_t b = uint8_t(bytes_[size_t(sorted_[i])][depth]);
    uint32_t j = i;
    while (j < hi && uint8_t(bytes_[size_t(sorted_[j])][depth]) == b) ++j;
    nodes_.push_back(Node{i, j, i, 0, 0, b});
    i = j;
  }
  const uint32_t count = uint32_t(nodes_.size()) - first;
  nodes_[node].first = first;
  nodes_[node].count = count;
  for (uint32_t c = 0; c < count; ++c) build(first + c, depth + 1);
}

std::shared_ptr<const Vocabulary> Vocabulary::from_tokenizer(const Tokenizer& tok, const VocabularyOptions& opt) {
  const int64_t n = opt.vocab_size > 0 ? opt.vocab_size : tok.vocab_size();
  std::vector<std::string> bytes(static_cast<size_t>(n));
  auto listed = [](const std::vector<int32_t>& v, int32_t id) { return std::find(v.begin(), v.end(), id) != v.end(); };
  for (int64_t id = 0; id < std::min<int64_t>(n, tok.vocab_size()); ++id) {
    const auto i = int32_t(id);
    if (listed(opt.exclude, i) || (tok.is_special(i) && !listed(opt.include_special, i))) continue;
    try {
      bytes[size_t(id)] = tok.token_bytes(i);
    } catch (const Error&) {  // an id without a token: never allowed
    }
  }
  return std::make_shared<const Vocabulary>(std::move(bytes));
}

}  // namespace dsv4::grammar
