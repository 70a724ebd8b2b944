#include "grammar/matcher.h"

#include <algorithm>
#include <string_view>
#include <unordered_map>

#include "core/error.h"

namespace dsv4::grammar {

namespace {

// The local grammar of a stack: its top three positions (fewer for a shallower stack). Three, so that
// a string's character rule, the repetition around it and the closing quote are all local: only
// tokens that run past the closing quote depend on the stack below.
constexpr size_t kLocalDepth = 3;
size_t local_depth(const Stack& s) { return std::min(kLocalDepth, s.size()); }

std::string key_of(const Stack& s) {
  const size_t n = local_depth(s);
  return std::string(reinterpret_cast<const char*>(s.data() + (s.size() - n)), n * sizeof(uint32_t));
}

}  // namespace

CompiledGrammar::CompiledGrammar(Grammar g, std::shared_ptr<const Vocabulary> vocab)
    : g_(std::move(g)), vocab_(std::move(vocab)) {
  g_.finish();
}

size_t CompiledGrammar::cached_entries() const {
  std::lock_guard<std::mutex> lk(mu_);
  return cache_.size();
}

const CompiledGrammar::Entry& CompiledGrammar::entry(const Stack& s) const {
  const std::string k = key_of(s);
  std::lock_guard<std::mutex> lk(mu_);
  auto it = cache_.find(k);
  if (it != cache_.end()) return *it->second;
  Stack local(s.end() - std::ptrdiff_t(local_depth(s)), s.end());
  return *(cache_[k] = compute(local));
}

// A depth-first walk over the trie, carrying the local grammar's states after each prefix and the
// prefix lengths at which the local grammar was complete (where the stack below would take over).
std::unique_ptr<CompiledGrammar::Entry> CompiledGrammar::compute(const Stack& local) const {
  auto e = std::make_unique<Entry>();
  const Vocabulary& v = *vocab_;
  e->accepted.assign(size_t((v.size() + 31) / 32), 0u);
  const auto& nodes = v.nodes();
  const auto& sorted = v.sorted();
  auto uncertain = [&](uint32_t lo, uint32_t hi, const std::vector<uint32_t>& exits) {
    for (uint32_t i = lo; i < hi; ++i)
      for (uint32_t off : exits) e->uncertain.emplace_back(sorted[i], off);
  };
  struct Walk {
    const CompiledGrammar& cg;
    const std::vector<Vocabulary::Node>& nodes;
    const std::vector<int32_t>& sorted;
    Entry& e;
    const decltype(uncertain)& unc;
    void run(uint32_t n, const State& st, std::vector<uint32_t>& exits, uint32_t depth) {
      const Vocabulary::Node& node = nodes[n];
      if (depth > 0) {
        if (!st.empty())
          for (uint32_t i = node.lo; i < node.end; ++i) mask_set(e.accepted, sorted[i]);
        else if (!exits.empty())
          unc(node.lo, node.end, exits);
      }
      const bool exit_here = Grammar::can_end(st);
      if (exit_here) exits.push_back(depth);
      State next;
      for (uint32_t c = node.first; c < node.first + node.count; ++c) {
        cg.g_.advance(st, nodes[c].byte, next);
        if (!next.empty())
          run(c, next, exits, depth + 1);
        else if (!exits.empty())
          unc(nodes[c].lo, nodes[c].hi, exits);
      }
      if (exit_here) exits.pop_back();
    }
  };
  State st{local};
  std::vector<uint32_t> exits;
  Walk{*this, nodes, sorted, *e, uncertain}.run(0, st, exits, 0);
  return e;
}

Matcher::Matcher(std::shared_ptr<const CompiledGrammar> g, std::vector<int32_t> end_ids)
    : g_(std::move(g)), end_ids_(std::move(end_ids)), state_(g_->grammar().initial()) {}

void Matcher::fill_mask(TokenMask& mask) const {
  const Vocabulary& v = g_->vocab();
  mask.assign(size_t((v.size() + 31) / 32), 0u);
  if (ended_) return;
  std::unordered_map<std::string_view, bool> memo;  // suffix -> accepted, per stack below
  State below, st;
  for (const Stack& s : state_) {
    if (s.empty()) continue;
    const CompiledGrammar::Entry& e = g_->entry(s);
    for (size_t w = 0; w < mask.size(); ++w) mask[w] |= e.accepted[w];
    if (e.uncertain.empty() || s.size() <= kLocalDepth) continue;  // nothing follows the root
    below.clear();
    g_->grammar().expand(Stack(s.begin(), s.end() - std::ptrdiff_t(kLocalDepth)), below);
    normalize(below);
    memo.clear();
    for (const auto& [id, off] : e.uncertain) {
      if (mask_test(mask, id)) continue;
      const std::string_view rest = std::string_view(v.bytes(id)).substr(off);
      auto it = memo.find(rest);
      if (it == memo.end()) {
        st = below;
        it = memo.emplace(rest, g_->grammar().advance_bytes(st, rest)).first;
      }
      if (it->second) mask_set(mask, id);
    }
  }
  if (can_end())
    for (int32_t id : end_ids_)
      if (id >= 0 && id < v.size()) mask_set(mask, id);
}

bool Matcher::accept(int32_t id) {
  if (ended_ || id < 0 || id >= g_->vocab().size()) return false;
  if (std::find(end_ids_.begin(), end_ids_.end(), id) != end_ids_.end()) {
    if (!can_end()) return false;
    ended_ = true;
    return true;
  }
  const std::string& b = g_->vocab().bytes(id);
  if (b.empty()) return false;
  State st = state_;
  if (!g_->grammar().advance_bytes(st, b)) return false;
  state_ = std::move(st);
  return true;
}

}  // namespace dsv4::grammar
