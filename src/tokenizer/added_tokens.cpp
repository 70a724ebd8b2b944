#include "tokenizer/added_tokens.h"

#include <algorithm>

namespace dsv4::tok {
namespace {

bool is_word_byte(char c) {
  unsigned char u = static_cast<unsigned char>(c);
  return (u >= '0' && u <= '9') || (u >= 'a' && u <= 'z') || (u >= 'A' && u <= 'Z') || u == '_' || u >= 0x80;
}

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'; }

}  // namespace

void AddedTokenMatcher::Trie::insert(std::string_view s, int32_t token) {
  if (s.empty()) return;
  first[static_cast<unsigned char>(s[0])] = true;
  int32_t n = 0;
  for (char ch : s) {
    uint8_t c = static_cast<uint8_t>(ch);
    auto& next = nodes[size_t(n)].next;
    auto it = std::lower_bound(next.begin(), next.end(), c, [](const auto& p, uint8_t v) { return p.first < v; });
    if (it != next.end() && it->first == c) {
      n = it->second;
    } else {
      int32_t child = int32_t(nodes.size());
      next.insert(it, {c, child});
      nodes.push_back(Node{});
      n = child;
    }
  }
  if (nodes[size_t(n)].token < 0) nodes[size_t(n)].token = token;  // first definition wins
}

int32_t AddedTokenMatcher::Trie::longest_at(std::string_view text, size_t i, size_t* len) const {
  int32_t n = 0, best = -1;
  for (size_t j = i; j < text.size(); ++j) {
    uint8_t c = static_cast<uint8_t>(text[j]);
    const auto& next = nodes[size_t(n)].next;
    auto it = std::lower_bound(next.begin(), next.end(), c, [](const auto& p, uint8_t v) { return p.first < v; });
    if (it == next.end() || it->first != c) break;
    n = it->second;
    if (nodes[size_t(n)].token >= 0) {
      best = nodes[size_t(n)].token;
      *len = j + 1 - i;
    }
  }
  return best;
}

AddedTokenMatcher::AddedTokenMatcher(const std::vector<AddedToken>& tokens) : tokens_(tokens) {
  for (size_t t = 0; t < tokens_.size(); ++t) {
    if (tokens_[t].normalized) {
      normalized_.insert(tokens_[t].content, int32_t(t));
      any_normalized_ = true;
    } else {
      raw_.insert(tokens_[t].content, int32_t(t));
    }
  }
}

void AddedTokenMatcher::split(std::string_view text, const std::function<void(std::string_view, int32_t)>& emit) const {
  if (!any_normalized_) {
    split_pass(raw_, text, emit);
    return;
  }
  split_pass(raw_, text, [&](std::string_view piece, int32_t id) {
    if (id >= 0)
      emit(piece, id);
    else
      split_pass(normalized_, piece, emit);
  });
}

void AddedTokenMatcher::split_pass(const Trie& trie, std::string_view text,
                                   const std::function<void(std::string_view, int32_t)>& emit) const {
  size_t emitted = 0;  // text before this offset has been emitted
  size_t i = 0;
  while (i < text.size()) {
    if (!trie.first[static_cast<unsigned char>(text[i])]) {
      ++i;
      continue;
    }
    size_t len = 0;
    int32_t t = trie.longest_at(text, i, &len);
    if (t < 0) {
      ++i;
      continue;
    }
    const AddedToken& tok = tokens_[size_t(t)];
    size_t start = i, stop = i + len;
    if (tok.single_word) {
      bool left_ok = start == 0 || !is_word_byte(text[start - 1]);
      bool right_ok = stop == text.size() || !is_word_byte(text[stop]);
      if (!left_ok || !right_ok) {
        ++i;
        continue;
      }
    }
    if (tok.lstrip)
      while (start > emitted && is_space(text[start - 1])) --start;
    if (tok.rstrip)
      while (stop < text.size() && is_space(text[stop])) ++stop;
    if (start > emitted) emit(text.substr(emitted, start - emitted), -1);
    emit(text.substr(start, stop - start), tok.id);
    emitted = stop;
    i = stop;
  }
  if (emitted < text.size()) emit(text.substr(emitted), -1);
}

}  // namespace dsv4::tok
