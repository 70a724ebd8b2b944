// Exact prefix reuse (issue #15): slot snapshots (backend/backend.h SlotSnapshot) kept at multiples of
// 128 tokens of a prompt, found again for a later request that starts with the same tokens.
//
// Why 128: the sliding window and both compress ratios divide it (V4: window 128, ratios 4 and 128), so
// at a 128-token boundary every compressor has just emitted a block and only the CSA overlap (the
// previous block's half) is carried; the backend's snapshot copies any partial state anyway, 128 keeps
// the index coarse.
//
// Index: a hash chain over 128-token blocks. h_0 = 0; h_i = H(h_{i-1}, tokens of block i), so h_i names
// the whole prefix [0, 128 i). H is SipHash-2-4 under a key drawn per cache (random_device): 64 bits,
// unpredictable to a client, so crafted collisions cannot pile up in one bucket. A hash names an entry
// only as a candidate: entries that share a hash are all kept and every hit compares the tokens
// themselves, so a collision costs a comparison and never gives another prefix's state (tested with an
// injected constant hash).
//
// Lookup returns the longest cached prefix of length <= tokens.size() - 1 (one token at least must be
// fed, to have logits). Entries are shared_ptr'd: a running request that restored from an entry keeps
// its snapshot alive after the cache evicted it. Eviction: least recently used (a lookup hit or a
// repeated insert makes an entry recent) while the bytes held exceed the budget. Bytes held: every
// entry's own bytes (its snapshot's copies, 4 per token of its prefix for the check, its carry) plus the
// KV pages the snapshots share, each page counted once however many entries share it (the turns of one
// conversation share all their earlier pages; SlotSnapshot::page_list). An evicted entry gives back its
// own bytes and the pages no other entry holds.
//
// The cache also remembers the chain hashes of recent lookups (no state; about 64 bytes a block with the
// hash map's node, LRU-bounded by seen_blocks): lookup reports how far a prompt agrees with an earlier
// one, so the caller can snapshot at that branch point (runtime/prefix_plan.h) and the third request
// sharing a system prompt hits.
//
// Places (data-parallel ranks, docs/multi-gpu.md): a snapshot is restored only into the backend that
// took it, so with N ranks each entry belongs to its rank's place. lookup / insert / evict_oldest name
// the place; the byte budget holds for each place on its own (each rank's GPU); the chain hashes of
// recent lookups are shared, so a prompt's branch point is found whichever rank served the earlier
// prompt; probe() tells the engine, before a request is placed, how long a prefix each place holds.
//
// Thread safety: every member locks one mutex (the scheduler thread calls lookup / insert, /metrics
// reads stats()).
#pragma once
#include <cstdint>
#include <functional>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <unordered_map>
#include <vector>

#include "backend/backend.h"

namespace dsv4 {

constexpr int64_t kPrefixBlock = 128;  // tokens per block of the hash chain

// H(prev, block): the chain's hash of a block given the previous block's hash.
using PrefixBlockHash = std::function<uint64_t(uint64_t prev, std::span<const int32_t> block)>;

// SipHash-2-4 (Aumasson, Bernstein 2012) of `len` bytes under the 128-bit key (k0, k1).
uint64_t siphash24(uint64_t k0, uint64_t k1, const uint8_t* data, size_t len);
// The default H: SipHash-2-4 of prev (8 bytes little-endian) then the block's ids (4 bytes each, LE).
uint64_t prefix_block_hash(uint64_t k0, uint64_t k1, uint64_t prev, std::span<const int32_t> block);

struct PrefixCacheOptions {
  uint64_t budget_bytes = 0;       // entries' bytes held at most, in each place (0: nothing is kept)
  int places = 1;                  // where snapshots live: one per data-parallel rank
  size_t seen_blocks = 1 << 16;    // chain hashes of recent lookups remembered (branch points)
  PrefixBlockHash hash = {};       // empty: prefix_block_hash under a random key
};

struct PrefixHit {
  int64_t tokens = 0;  // length of the cached prefix found (a multiple of 128; 0: none)
  std::shared_ptr<const SlotSnapshot> snapshot = {};  // the slot's state after those tokens (null: none)
  // What the inserter kept beside the snapshot (null: nothing): with speculative decoding the main
  // model's last-layer streams of the positions the MTP block has not fed yet (runtime/speculative.h).
  std::shared_ptr<const Tensor> carry = {};
  // The longest multiple of 128 (<= tokens.size() - 1) up to which this prompt agrees with an earlier
  // lookup's (by hash only: a hint for where to snapshot, never used for state). >= tokens.
  int64_t shared_tokens = 0;
};

// Counters since start and gauges, for /metrics (docs/server.md "Prefix cache").
struct PrefixCacheStats {
  uint64_t lookups = 0;
  uint64_t hits = 0;         // lookups that found a prefix
  uint64_t hit_tokens = 0;   // prompt tokens covered by the prefixes found
  uint64_t miss_tokens = 0;  // prompt tokens left to compute (tokens.size() - hit)
  uint64_t inserts = 0;      // entries added
  uint64_t evictions = 0;    // entries dropped for the budget
  uint64_t bytes = 0;        // gauge: bytes held (every place)
  uint64_t entries = 0;      // gauge: entries held
  uint64_t budget_bytes = 0;  // every place's budget together
};

class PrefixCache {
 public:
  explicit PrefixCache(PrefixCacheOptions o = {});

  int places() const { return opt_.places; }

  // The longest prefix of `tokens` no longer than tokens.size() - 1 cached in `place`; counts a lookup,
  // its hit and miss tokens, and remembers the prompt's chain hashes. The entry found becomes the most
  // recent.
  PrefixHit lookup(std::span<const int32_t> tokens, int place = 0);
  // For every place, the length of the prefix lookup would find there (0: none). Counts nothing and
  // changes nothing (no recency, no hashes remembered).
  std::vector<int64_t> probe(std::span<const int32_t> tokens) const;

  // Keeps `snap`, the state after `prefix` (a nonzero multiple of 128 tokens; snap->pos must equal its
  // length), in `place`. False, and nothing changes but recency, when that prefix is cached there
  // already; false when the entry alone exceeds the budget. Otherwise evicts the place's least recent
  // entries until it fits. `carry` comes back with the hit (its floats count in the entry's bytes).
  bool insert(std::span<const int32_t> prefix, std::shared_ptr<const SlotSnapshot> snap,
              std::shared_ptr<const Tensor> carry = {}, int place = 0);

  // An entry for exactly this prefix in `place` (no recency).
  bool contains(std::span<const int32_t> prefix, int place = 0) const;
  PrefixCacheStats stats() const;
  void clear();  // drops every entry and the remembered hashes (counters stay)
  // Drops the least recently used entry of `place` (an eviction, as under the byte budget); false when
  // it has none. The engine calls it when that rank's KV page pool runs short (snapshots hold pages).
  bool evict_oldest(int place = 0);

  // Bytes of a snapshot for a prefix of `tokens` tokens on its own, its shared pages counted whole (an
  // entry larger than the budget is refused).
  static uint64_t entry_bytes(const SlotSnapshot& s, int64_t tokens, const Tensor* carry = nullptr) {
    return s.bytes() + uint64_t(tokens) * 4 + (carry ? uint64_t(carry->numel()) * sizeof(float) : 0);
  }

 private:
  struct Entry {
    uint64_t hash = 0;
    int place = 0;
    std::vector<int32_t> tokens;
    std::shared_ptr<const SlotSnapshot> snap;
    std::shared_ptr<const Tensor> carry;
    uint64_t bytes = 0;  // its own: entry_bytes less the shared pages
    SlotSnapshot::PageList pages;
  };
  using PageKey = std::pair<const void*, int32_t>;  // (pool, page id)
  using Lru = std::list<Entry>;  // most recent first

  // h_1 .. h_n of the first n blocks of tokens.
  std::vector<uint64_t> chain(std::span<const int32_t> tokens, int64_t n) const;
  Lru::iterator find(uint64_t h, std::span<const int32_t> prefix, int place) const;  // lru_.end(): none
  // The longest cached prefix of blocks 1..n of `tokens` in `place` (lru_.end(), 0: none).
  std::pair<Lru::iterator, int64_t> longest(std::span<const int32_t> tokens, const std::vector<uint64_t>& h,
                                            int place) const;
  void check_place(int place) const;
  void remember(const std::vector<uint64_t>& hashes);
  bool drop_oldest(int place);  // under mu_: the place's least recent entry; false when it has none
  uint64_t new_page_bytes(const SlotSnapshot::PageList& p) const;  // of its pages no entry holds yet

  PrefixCacheOptions opt_;
  mutable std::mutex mu_;
  mutable Lru lru_;
  std::unordered_multimap<uint64_t, Lru::iterator> index_;
  std::map<PageKey, int64_t> page_refs_;  // entries holding each shared page
  std::vector<uint64_t> place_bytes_;     // per place: the bytes its entries hold
  std::list<uint64_t> seen_lru_;  // most recent first
  std::unordered_map<uint64_t, std::list<uint64_t>::iterator> seen_;
  PrefixCacheStats st_;
};

}  // namespace dsv4
