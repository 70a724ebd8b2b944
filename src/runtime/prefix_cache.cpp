#include "runtime/prefix_cache.h"

#include <algorithm>
#include <random>

#include "core/error.h"

namespace dsv4 {

namespace {

uint64_t rotl(uint64_t x, int b) { return (x << b) | (x >> (64 - b)); }

struct SipState {
  uint64_t v0, v1, v2, v3;
  void round() {
    v0 += v1; v1 = rotl(v1, 13); v1 ^= v0; v0 = rotl(v0, 32);
    v2 += v3; v3 = rotl(v3, 16); v3 ^= v2;
    v0 += v3; v3 = rotl(v3, 21); v3 ^= v0;
    v2 += v1; v1 = rotl(v1, 17); v1 ^= v2; v2 = rotl(v2, 32);
  }
  void absorb(uint64_t m) {
    v3 ^= m;
    round();
    round();
    v0 ^= m;
  }
};

uint64_t load_le64(const uint8_t* p) {
  uint64_t m = 0;
  for (int i = 7; i >= 0; --i) m = (m << 8) | p[i];
  return m;
}

}  // namespace

uint64_t siphash24(uint64_t k0, uint64_t k1, const uint8_t* data, size_t len) {
  SipState s{k0 ^ 0x736f6d6570736575ull, k1 ^ 0x646f72616e646f6dull, k0 ^ 0x6c7967656e657261ull,
             k1 ^ 0x7465646279746573ull};
  const size_t whole = len / 8 * 8;
  for (size_t i = 0; i < whole; i += 8) s.absorb(load_le64(data + i));
  uint64_t last = uint64_t(len & 0xff) << 56;  // the length's low byte, then the tail bytes
  for (size_t i = whole; i < len; ++i) last |= uint64_t(data[i]) << (8 * (i - whole));
  s.absorb(last);
  s.v2 ^= 0xff;
  for (int i = 0; i < 4; ++i) s.round();
  return s.v0 ^ s.v1 ^ s.v2 ^ s.v3;
}

uint64_t prefix_block_hash(uint64_t k0, uint64_t k1, uint64_t prev, std::span<const int32_t> block) {
  std::vector<uint8_t> bytes(8 + block.size() * 4);
  for (int i = 0; i < 8; ++i) bytes[size_t(i)] = uint8_t(prev >> (8 * i));
  for (size_t t = 0; t < block.size(); ++t)
    for (int i = 0; i < 4; ++i) bytes[8 + 4 * t + size_t(i)] = uint8_t(uint32_t(block[t]) >> (8 * i));
  return siphash24(k0, k1, bytes.data(), bytes.size());
}

PrefixCache::PrefixCache(PrefixCacheOptions o) : opt_(std::move(o)) {
  if (!opt_.hash) {
    std::random_device rd;
    const uint64_t k0 = (uint64_t(rd()) << 32) ^ rd(), k1 = (uint64_t(rd()) << 32) ^ rd();
    opt_.hash = [k0, k1](uint64_t prev, std::span<const int32_t> block) {
      return prefix_block_hash(k0, k1, prev, block);
    };
  }
  if (opt_.places < 1) fail("prefix cache: expected at least 1 place, got ", opt_.places);
  place_bytes_.assign(size_t(opt_.places), 0);
  st_.budget_bytes = opt_.budget_bytes * uint64_t(opt_.places);
}

void PrefixCache::check_place(int place) const {
  if (place < 0 || place >= opt_.places)
    fail("prefix cache: place ", place, " of ", opt_.places, " (expected 0 to ", opt_.places - 1, ")");
}

std::vector<uint64_t> PrefixCache::chain(std::span<const int32_t> tokens, int64_t n) const {
  std::vector<uint64_t> h(static_cast<size_t>(n));
  uint64_t prev = 0;
  for (int64_t i = 0; i < n; ++i) prev = h[size_t(i)] = opt_.hash(prev, tokens.subspan(size_t(i * kPrefixBlock), kPrefixBlock));
  return h;
}

PrefixCache::Lru::iterator PrefixCache::find(uint64_t h, std::span<const int32_t> prefix, int place) const {
  auto [b, e] = index_.equal_range(h);
  for (auto it = b; it != e; ++it) {
    const std::vector<int32_t>& t = it->second->tokens;
    if (it->second->place == place && t.size() == prefix.size() && std::equal(t.begin(), t.end(), prefix.begin()))
      return it->second;
  }
  return lru_.end();
}

std::pair<PrefixCache::Lru::iterator, int64_t> PrefixCache::longest(std::span<const int32_t> tokens,
                                                                    const std::vector<uint64_t>& h, int place) const {
  for (int64_t i = int64_t(h.size()); i >= 1; --i) {
    auto it = find(h[size_t(i - 1)], tokens.first(size_t(i * kPrefixBlock)), place);
    if (it != lru_.end()) return {it, i * kPrefixBlock};
  }
  return {lru_.end(), 0};
}

void PrefixCache::remember(const std::vector<uint64_t>& hashes) {
  if (opt_.seen_blocks == 0) return;
  for (uint64_t h : hashes) {
    auto it = seen_.find(h);
    if (it != seen_.end()) {
      seen_lru_.splice(seen_lru_.begin(), seen_lru_, it->second);
      continue;
    }
    seen_lru_.push_front(h);
    seen_[h] = seen_lru_.begin();
    if (seen_.size() > opt_.seen_blocks) {
      seen_.erase(seen_lru_.back());
      seen_lru_.pop_back();
    }
  }
}

namespace {
int64_t lookup_blocks(std::span<const int32_t> tokens) {
  return tokens.empty() ? 0 : int64_t(tokens.size() - 1) / kPrefixBlock;
}
}  // namespace

PrefixHit PrefixCache::lookup(std::span<const int32_t> tokens, int place) {
  check_place(place);
  std::lock_guard<std::mutex> lock(mu_);
  ++st_.lookups;
  PrefixHit hit;
  const int64_t n = lookup_blocks(tokens);
  const std::vector<uint64_t> h = chain(tokens, n);
  if (auto [it, len] = longest(tokens, h, place); it != lru_.end()) {
    lru_.splice(lru_.begin(), lru_, it);
    hit.tokens = len;
    hit.snapshot = it->snap;
    hit.carry = it->carry;
  }
  for (int64_t i = n; i >= 1; --i)
    if (seen_.count(h[size_t(i - 1)])) {
      hit.shared_tokens = i * kPrefixBlock;
      break;
    }
  hit.shared_tokens = std::max(hit.shared_tokens, hit.tokens);
  remember(h);
  if (hit.snapshot) ++st_.hits;
  st_.hit_tokens += uint64_t(hit.tokens);
  st_.miss_tokens += uint64_t(int64_t(tokens.size()) - hit.tokens);
  return hit;
}

std::vector<int64_t> PrefixCache::probe(std::span<const int32_t> tokens) const {
  std::lock_guard<std::mutex> lock(mu_);
  const std::vector<uint64_t> h = chain(tokens, lookup_blocks(tokens));
  std::vector<int64_t> out(size_t(opt_.places), 0);
  if (lru_.empty()) return out;
  for (int p = 0; p < opt_.places; ++p) out[size_t(p)] = longest(tokens, h, p).second;
  return out;
}

bool PrefixCache::insert(std::span<const int32_t> prefix, std::shared_ptr<const SlotSnapshot> snap,
                         std::shared_ptr<const Tensor> carry, int place) {
  check_place(place);
  const int64_t len = int64_t(prefix.size());
  if (len == 0 || len % kPrefixBlock != 0)
    fail("prefix cache: a prefix of ", len, " tokens, expected a nonzero multiple of ", kPrefixBlock);
  if (!snap) fail("prefix cache: no snapshot for a prefix of ", len, " tokens");
  if (snap->pos != len) fail("prefix cache: a snapshot at position ", snap->pos, " for a prefix of ", len, " tokens");
  std::lock_guard<std::mutex> lock(mu_);
  const uint64_t h = chain(prefix, len / kPrefixBlock).back();
  if (auto it = find(h, prefix, place); it != lru_.end()) {
    lru_.splice(lru_.begin(), lru_, it);
    return false;
  }
  const uint64_t alone = entry_bytes(*snap, len, carry.get());
  if (alone > opt_.budget_bytes) return false;
  SlotSnapshot::PageList pages = snap->page_list();
  const uint64_t shared = uint64_t(pages.ids.size()) * pages.page_bytes;
  if (shared > alone) fail("prefix cache: a snapshot shares ", shared, " bytes of pages but holds ", alone);
  const uint64_t own = alone - shared;
  // Evict until it fits: its own bytes and the pages no remaining entry holds (evicting an entry that
  // shares pages with it makes those pages its charge). A place's pages are its backend's: no entry of
  // another place shares them.
  uint64_t& held = place_bytes_[size_t(place)];
  while (held + own + new_page_bytes(pages) > opt_.budget_bytes && drop_oldest(place)) {
  }
  st_.entries = lru_.size();
  for (int32_t id : pages.ids)
    if (page_refs_[{pages.pool, id}]++ == 0) {
      st_.bytes += pages.page_bytes;
      held += pages.page_bytes;
    }
  lru_.push_front(Entry{.hash = h, .place = place, .tokens = {prefix.begin(), prefix.end()}, .snap = std::move(snap),
                        .carry = std::move(carry), .bytes = own, .pages = std::move(pages)});
  index_.emplace(h, lru_.begin());
  st_.bytes += own;
  held += own;
  st_.entries = lru_.size();
  ++st_.inserts;
  return true;
}

bool PrefixCache::evict_oldest(int place) {
  check_place(place);
  std::lock_guard<std::mutex> lock(mu_);
  const bool dropped = drop_oldest(place);
  st_.entries = lru_.size();
  return dropped;
}

uint64_t PrefixCache::new_page_bytes(const SlotSnapshot::PageList& p) const {
  uint64_t n = 0;
  for (int32_t id : p.ids)
    if (!page_refs_.count({p.pool, id})) n += p.page_bytes;
  return n;
}

bool PrefixCache::drop_oldest(int place) {
  auto last = std::find_if(lru_.rbegin(), lru_.rend(), [&](const Entry& e) { return e.place == place; });
  if (last == lru_.rend()) return false;
  const Entry& e = *last;
  auto [b, end] = index_.equal_range(e.hash);
  for (auto it = b; it != end; ++it)
    if (&*it->second == &e) {
      index_.erase(it);
      break;
    }
  uint64_t& held = place_bytes_[size_t(place)];
  st_.bytes -= e.bytes;
  held -= e.bytes;
  for (int32_t id : e.pages.ids) {
    auto it = page_refs_.find({e.pages.pool, id});
    if (--it->second == 0) {
      page_refs_.erase(it);
      st_.bytes -= e.pages.page_bytes;
      held -= e.pages.page_bytes;
    }
  }
  lru_.erase(std::next(last).base());  // a request holding the snapshot keeps it alive
  ++st_.evictions;
  return true;
}

bool PrefixCache::contains(std::span<const int32_t> prefix, int place) const {
  check_place(place);
  if (prefix.empty() || prefix.size() % kPrefixBlock != 0) return false;
  std::lock_guard<std::mutex> lock(mu_);
  return find(chain(prefix, int64_t(prefix.size()) / kPrefixBlock).back(), prefix, place) != lru_.end();
}

PrefixCacheStats PrefixCache::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return st_;
}

void PrefixCache::clear() {
  std::lock_guard<std::mutex> lock(mu_);
  index_.clear();
  lru_.clear();
  seen_.clear();
  seen_lru_.clear();
  page_refs_.clear();
  place_bytes_.assign(place_bytes_.size(), 0);
  st_.bytes = 0;
  st_.entries = 0;
}

}  // namespace dsv4
