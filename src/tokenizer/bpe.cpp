#include "tokenizer/bpe.h"

#include <mutex>
#include <queue>

namespace dsv4::tok {
namespace {

constexpr size_t kCacheMaxPieceBytes = 64;   // longer pre-tokens are rare and not worth keeping
constexpr size_t kCacheMaxEntries = 1 << 16; // cleared when full

uint64_t pair_key(int32_t a, int32_t b) { return (uint64_t(uint32_t(a)) << 32) | uint32_t(b); }

struct Symbol {
  int32_t id;
  int32_t prev, next;  // indices in the symbol array, -1 at the ends
  bool alive;
};

struct Candidate {
  int32_t rank, pos, new_id;
  // std::priority_queue pops the largest: invert so the lowest rank, then the leftmost, comes first.
  bool operator<(const Candidate& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
};

}  // namespace

struct BpeModel::Cache {
  std::mutex mu;
  std::unordered_map<std::string, std::vector<int32_t>, StringHash, std::equal_to<>> map;
};

BpeModel::BpeModel(StringIdMap vocab, const std::vector<Merge>& merges, bool ignore_merges)
    : vocab_(std::move(vocab)), ignore_merges_(ignore_merges), cache_(std::make_unique<Cache>()) {
  for (int b = 0; b < 256; ++b) {
    auto it = vocab_.find(std::string_view(reinterpret_cast<const char*>(&b), 1));
    byte_id_[b] = it == vocab_.end() ? -1 : it->second;
  }
  merges_.reserve(merges.size() * 2);
  for (size_t r = 0; r < merges.size(); ++r) {
    const Merge& m = merges[r];
    merges_.insert_or_assign(pair_key(m.left, m.right), std::make_pair(int32_t(r), m.result));  // HF: last wins
  }
}

BpeModel::~BpeModel() = default;

void BpeModel::encode(std::string_view piece, std::vector<int32_t>& out) const {
  if (piece.empty()) return;
  if (ignore_merges_) {
    if (auto it = vocab_.find(piece); it != vocab_.end()) {
      out.push_back(it->second);
      return;
    }
  }
  if (piece.size() == 1) {
    if (int32_t id = byte_id_[uint8_t(piece[0])]; id >= 0) out.push_back(id);
    return;
  }
  if (piece.size() > kCacheMaxPieceBytes) {
    merge_all(piece, out);
    return;
  }
  {
    std::lock_guard<std::mutex> lock(cache_->mu);
    if (auto it = cache_->map.find(piece); it != cache_->map.end()) {
      out.insert(out.end(), it->second.begin(), it->second.end());
      return;
    }
  }
  size_t start = out.size();
  merge_all(piece, out);
  std::vector<int32_t> ids(out.begin() + std::ptrdiff_t(start), out.end());
  std::lock_guard<std::mutex> lock(cache_->mu);
  if (cache_->map.size() >= kCacheMaxEntries) cache_->map.clear();
  cache_->map.emplace(std::string(piece), std::move(ids));
}

void BpeModel::merge_all(std::string_view piece, std::vector<int32_t>& out) const {
  std::vector<Symbol> sym;
  sym.reserve(piece.size());
  for (char c : piece) {
    int32_t id = byte_id_[uint8_t(c)];
    if (id < 0) continue;
    int32_t i = int32_t(sym.size());
    sym.push_back({id, i - 1, i + 1, true});
  }
  if (sym.empty()) return;
  sym.back().next = -1;

  auto lookup = [&](int32_t a, int32_t b) -> const std::pair<int32_t, int32_t>* {
    auto it = merges_.find(pair_key(a, b));
    return it == merges_.end() ? nullptr : &it->second;
  };
  std::vector<Candidate> init;
  init.reserve(sym.size());
  for (size_t i = 0; i + 1 < sym.size(); ++i)
    if (auto* m = lookup(sym[i].id, sym[i + 1].id)) init.push_back({m->first, int32_t(i), m->second});
  std::priority_queue<Candidate> queue(std::less<Candidate>(), std::move(init));

  while (!queue.empty()) {
    Candidate top = queue.top();
    queue.pop();
    Symbol& left = sym[size_t(top.pos)];
    if (!left.alive || left.next < 0) continue;
    Symbol& right = sym[size_t(left.next)];
    // Stale entry: the pair at this position changed since it was queued.
    auto* m = lookup(left.id, right.id);
    if (!m || m->second != top.new_id) continue;
    left.id = top.new_id;
    right.alive = false;
    left.next = right.next;
    if (right.next >= 0) sym[size_t(right.next)].prev = top.pos;
    if (left.prev >= 0)
      if (auto* p = lookup(sym[size_t(left.prev)].id, left.id)) queue.push({p->first, left.prev, p->second});
    if (left.next >= 0)
      if (auto* n = lookup(left.id, sym[size_t(left.next)].id)) queue.push({n->first, top.pos, n->second});
  }
  for (int32_t i = 0; i >= 0; i = sym[size_t(i)].next) out.push_back(sym[size_t(i)].id);
}

}  // namespace dsv4::tok
