// The prefix cache (runtime/prefix_cache.h) and its snapshot plan (runtime/prefix_plan.h): first with a
// fake snapshot (hashing, longest match, collisions through an injected hash, LRU order, the budget, a
// held entry surviving eviction), then on the CPU model: a prompt restored from a cached prefix gives the
// logits and greedy ids of a cold run on a fresh slot, bit for bit, having fed only its new tokens.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "core/error.h"
#include "model/model.h"
#include "runtime/prefix_cache.h"
#include "runtime/prefix_plan.h"
#include "runtime/prefix_reuse.h"
#include "support/test_paths.h"

namespace dsv4 {
namespace {

// ---------------------------------------------------------------- unit tests with a fake snapshot

struct FakeSnapshot final : SlotSnapshot {
  FakeSnapshot(int64_t at, uint64_t b, int tag_) : size(b), tag(tag_) { pos = at; }
  uint64_t bytes() const override { return size; }
  uint64_t size;
  int tag;
};

std::shared_ptr<const SlotSnapshot> fake(int64_t pos, uint64_t bytes = 1000, int tag = 0) {
  return std::make_shared<FakeSnapshot>(pos, bytes, tag);
}
int tag_of(const PrefixHit& h) { return h.snapshot ? dynamic_cast<const FakeSnapshot&>(*h.snapshot).tag : -1; }

// n ids, distinct per seed.
std::vector<int32_t> seq(int64_t n, int32_t seed) {
  std::vector<int32_t> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[size_t(i)] = int32_t((seed * 7919 + 31 * i + i * i) % 1000);
  return v;
}
std::vector<int32_t> first(const std::vector<int32_t>& v, int64_t n) { return {v.begin(), v.begin() + n}; }
std::vector<int32_t> concat(std::vector<int32_t> a, const std::vector<int32_t>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

TEST(PrefixHash, SipHashTestVectors) {
  // The reference vectors of the SipHash paper: key 00 01 .. 0f, messages 00 01 .. (len - 1).
  uint8_t key[16], msg[64];
  for (int i = 0; i < 16; ++i) key[i] = uint8_t(i);
  for (int i = 0; i < 64; ++i) msg[i] = uint8_t(i);
  uint64_t k0, k1;
  std::memcpy(&k0, key, 8);  // little-endian machine (x86-64, aarch64)
  std::memcpy(&k1, key + 8, 8);
  EXPECT_EQ(siphash24(k0, k1, msg, 0), 0x726fdb47dd0e0e31ull);
  EXPECT_EQ(siphash24(k0, k1, msg, 15), 0xa129ca6149be45e5ull);
}

TEST(PrefixHash, ChainDependsOnEveryTokenAndThePrevious) {
  const auto b = seq(128, 1);
  const uint64_t h = prefix_block_hash(1, 2, 0, b);
  EXPECT_NE(prefix_block_hash(1, 2, 1, b), h);  // the previous block's hash
  EXPECT_NE(prefix_block_hash(1, 3, 0, b), h);  // the key
  for (size_t i : {size_t(0), size_t(77), size_t(127)}) {
    auto c = b;
    c[i] ^= 1;
    EXPECT_NE(prefix_block_hash(1, 2, 0, c), h) << i;
  }
  // Two blocks swapped name another prefix.
  const auto b2 = seq(128, 2);
  EXPECT_NE(prefix_block_hash(1, 2, prefix_block_hash(1, 2, 0, b), b2),
            prefix_block_hash(1, 2, prefix_block_hash(1, 2, 0, b2), b));
}

TEST(PrefixCache, LongestCachedPrefixLeavingOneToken) {
  PrefixCache c({.budget_bytes = 1 << 20});
  const auto a = seq(700, 1);
  ASSERT_TRUE(c.insert(first(a, 128), fake(128, 1000, 1)));
  ASSERT_TRUE(c.insert(first(a, 256), fake(256, 1000, 2)));
  ASSERT_TRUE(c.insert(first(a, 512), fake(512, 1000, 4)));
  struct Case { int64_t len; int64_t hit; int tag; };
  for (const Case& k : {Case{100, 0, -1}, Case{128, 0, -1}, Case{129, 128, 1}, Case{256, 128, 1}, Case{257, 256, 2},
                        Case{512, 256, 2}, Case{513, 512, 4}, Case{700, 512, 4}}) {
    const PrefixHit h = c.lookup(first(a, k.len));
    EXPECT_EQ(h.tokens, k.hit) << k.len;
    EXPECT_EQ(tag_of(h), k.tag) << k.len;
  }
  // A prompt that parts from `a` at token 300 gets 256; one that parts in the first block nothing.
  auto b = a;
  b[300] ^= 1;
  EXPECT_EQ(c.lookup(b).tokens, 256);
  b[5] ^= 1;
  EXPECT_EQ(c.lookup(b).tokens, 0);
  EXPECT_EQ(c.lookup({}).tokens, 0);
  const PrefixCacheStats s = c.stats();
  EXPECT_EQ(s.lookups, 11u);
  EXPECT_EQ(s.hits, 7u);
  EXPECT_EQ(s.hit_tokens, 128u + 128 + 256 + 256 + 512 + 512 + 256);
  EXPECT_EQ(s.miss_tokens, 100u + 128 + 1 + 128 + 1 + 256 + 1 + 188 + (700 - 256) + 700);
  EXPECT_EQ(s.inserts, 3u);
  EXPECT_EQ(s.entries, 3u);
}

// Places (data-parallel ranks): an entry is found only in its own place, probe() tells each place's
// hit without counting or touching anything, each place has its budget, evict_oldest takes the place's
// oldest, and the prompts remembered for branch points are shared by all places.
TEST(PrefixCache, PlacesKeepTheirOwnEntriesAndBudgets) {
  // 2,600 bytes a place: one entry of 1,000 + 4 x 128 fits, two do not.
  PrefixCache c({.budget_bytes = 2600, .places = 2});
  EXPECT_EQ(c.places(), 2);
  EXPECT_EQ(c.stats().budget_bytes, 5200u);
  const auto a = seq(700, 1), b = seq(700, 2);
  ASSERT_TRUE(c.insert(first(a, 128), fake(128, 1000, 1), {}, 0));
  ASSERT_TRUE(c.insert(first(a, 256), fake(256, 1000, 2), {}, 1));
  EXPECT_TRUE(c.contains(first(a, 128), 0));
  EXPECT_FALSE(c.contains(first(a, 128), 1));
  EXPECT_EQ(c.probe(a), (std::vector<int64_t>{128, 256}));
  EXPECT_EQ(c.probe(first(a, 200)), (std::vector<int64_t>{128, 0}));
  EXPECT_EQ(c.probe(b), (std::vector<int64_t>{0, 0}));
  EXPECT_EQ(c.stats().lookups, 0u);  // probes are not lookups
  const PrefixHit h0 = c.lookup(a, 0), h1 = c.lookup(a, 1);
  EXPECT_EQ(h0.tokens, 128);
  EXPECT_EQ(tag_of(h0), 1);
  EXPECT_EQ(h1.tokens, 256);
  EXPECT_EQ(tag_of(h1), 2);
  // Another entry in place 0 evicts place 0's, and place 1's stays.
  ASSERT_TRUE(c.insert(first(b, 128), fake(128, 1000, 3), {}, 0));
  EXPECT_EQ(c.stats().evictions, 1u);
  EXPECT_EQ(c.lookup(a, 0).tokens, 0);
  EXPECT_EQ(c.lookup(a, 1).tokens, 256);
  EXPECT_EQ(c.stats().bytes, (1000u + 4 * 128) + (1000u + 4 * 256));
  // The same prefix in both places: two entries.
  ASSERT_TRUE(c.insert(first(b, 128), fake(128, 1000, 4), {}, 1));
  EXPECT_EQ(c.stats().evictions, 2u);  // place 1's budget: a's entry went
  EXPECT_EQ(tag_of(c.lookup(b, 0)), 3);
  EXPECT_EQ(tag_of(c.lookup(b, 1)), 4);
  ASSERT_TRUE(c.evict_oldest(1));
  EXPECT_FALSE(c.evict_oldest(1));
  EXPECT_EQ(c.stats().entries, 1u);
  EXPECT_EQ(tag_of(c.lookup(b, 0)), 3);
  // A prompt seen in place 0 makes the branch point of one looked up in place 1.
  const auto x = concat(first(seq(400, 5), 300), seq(50, 6)), y = concat(first(seq(400, 5), 300), seq(50, 7));
  EXPECT_EQ(c.lookup(x, 0).shared_tokens, 0);
  EXPECT_EQ(c.lookup(y, 1).shared_tokens, 256);
  EXPECT_THROW(c.lookup(a, 2), Error);
  EXPECT_THROW(c.insert(first(a, 128), fake(128), {}, -1), Error);
  EXPECT_THROW(c.evict_oldest(2), Error);
  EXPECT_THROW(PrefixCache({.budget_bytes = 1, .places = 0}), Error);
}

// What an inserter keeps beside the snapshot (speculative decoding: the MTP block's pending streams)
// comes back with the hit, its floats counted in the entry's bytes; an entry without one has none.
TEST(PrefixCache, CarryComesBackWithTheHit) {
  PrefixCache c({.budget_bytes = 1 << 20});
  const auto a = seq(300, 1), b = seq(300, 2);
  Tensor S({1, 4, 8});
  for (size_t i = 0; i < S.data.size(); ++i) S.data[i] = float(i) * 0.5f;
  ASSERT_TRUE(c.insert(first(a, 128), fake(128, 1000, 1), std::make_shared<const Tensor>(S)));
  ASSERT_TRUE(c.insert(first(b, 128), fake(128, 1000, 2)));
  const PrefixHit ha = c.lookup(a), hb = c.lookup(b);
  ASSERT_TRUE(ha.carry);
  EXPECT_EQ(ha.carry->data, S.data);
  EXPECT_EQ(ha.carry->shape, S.shape);
  EXPECT_FALSE(hb.carry);
  EXPECT_EQ(c.stats().bytes, (1000 + 128 * 4 + 32 * 4) + (1000 + 128 * 4));
}

TEST(PrefixCache, CollisionsNeverGiveAnotherPrefix) {
  // Every prefix hashes to 42: only the token check tells them apart.
  PrefixCache c({.budget_bytes = 1 << 20, .hash = [](uint64_t, std::span<const int32_t>) { return uint64_t(42); }});
  const auto a = seq(300, 1), b = seq(300, 2), z = seq(300, 3);
  ASSERT_TRUE(c.insert(first(a, 128), fake(128, 100, 1)));
  ASSERT_TRUE(c.insert(first(b, 128), fake(128, 100, 2)));
  ASSERT_TRUE(c.insert(first(a, 256), fake(256, 100, 3)));
  EXPECT_EQ(tag_of(c.lookup(a)), 3);
  EXPECT_EQ(tag_of(c.lookup(first(a, 200))), 1);
  EXPECT_EQ(tag_of(c.lookup(b)), 2);
  EXPECT_EQ(c.lookup(b).tokens, 128);  // b's 256-prefix collides with a's entry, and is not it
  EXPECT_EQ(tag_of(c.lookup(z)), -1);
  EXPECT_FALSE(c.insert(first(b, 128), fake(128, 100, 9)));  // already there: kept, not replaced
  EXPECT_EQ(tag_of(c.lookup(b)), 2);
  EXPECT_TRUE(c.contains(first(a, 256)));
  EXPECT_FALSE(c.contains(first(z, 128)));

  // A weak hash (the first token of the block, chained by xor) that collides from the second block on.
  PrefixCache w({.budget_bytes = 1 << 20, .hash = [](uint64_t prev, std::span<const int32_t> blk) {
                   return prev ^ uint64_t(blk[0]);
                 }});
  auto a2 = a;
  a2[200] ^= 1;  // same first token in every block as a: same chain
  ASSERT_TRUE(w.insert(first(a, 256), fake(256, 100, 5)));
  EXPECT_EQ(w.lookup(a2).tokens, 0);
  EXPECT_EQ(w.lookup(a).tokens, 256);
}

TEST(PrefixCache, LeastRecentlyUsedGoesFirst) {
  // Entries of 1000 + 4 * 128 bytes; room for three.
  const uint64_t e = PrefixCache::entry_bytes(*fake(128), 128);
  PrefixCache c({.budget_bytes = 3 * e});
  const auto a = seq(200, 1), b = seq(200, 2), d = seq(200, 3), f = seq(200, 4), g = seq(200, 5);
  for (const auto* p : {&a, &b, &d}) ASSERT_TRUE(c.insert(first(*p, 128), fake(128)));
  EXPECT_EQ(c.stats().bytes, 3 * e);
  EXPECT_EQ(c.lookup(a).tokens, 128);  // a is now the most recent: b is the least
  ASSERT_TRUE(c.insert(first(f, 128), fake(128)));
  EXPECT_FALSE(c.contains(first(b, 128)));
  EXPECT_TRUE(c.contains(first(a, 128)) && c.contains(first(d, 128)) && c.contains(first(f, 128)));
  EXPECT_FALSE(c.insert(first(d, 128), fake(128)));  // a repeated insert makes d recent: a goes next
  ASSERT_TRUE(c.insert(first(g, 128), fake(128)));
  EXPECT_FALSE(c.contains(first(a, 128)));
  EXPECT_TRUE(c.contains(first(d, 128)));
  const PrefixCacheStats s = c.stats();
  EXPECT_EQ(s.evictions, 2u);
  EXPECT_EQ(s.entries, 3u);
  EXPECT_EQ(s.bytes, 3 * e);
}

TEST(PrefixCache, BudgetInBytes) {
  const auto a = seq(600, 1);
  PrefixCache none({.budget_bytes = 0});
  EXPECT_FALSE(none.insert(first(a, 128), fake(128)));
  EXPECT_EQ(none.stats().entries, 0u);

  // An entry of 5000 + 4 * 256 bytes evicts both entries of 1512 under a budget of 6500; one larger
  // than the whole budget is refused and evicts nothing.
  PrefixCache c({.budget_bytes = 6500});
  ASSERT_TRUE(c.insert(first(a, 128), fake(128)));
  ASSERT_TRUE(c.insert(first(seq(128, 2), 128), fake(128)));
  EXPECT_EQ(c.stats().bytes, 2 * 1512u);
  EXPECT_FALSE(c.insert(first(a, 384), fake(384, 6000)));
  EXPECT_EQ(c.stats().entries, 2u);
  ASSERT_TRUE(c.insert(first(a, 256), fake(256, 5000)));
  EXPECT_EQ(c.stats().bytes, 5000u + 4 * 256);
  EXPECT_EQ(c.stats().entries, 1u);
  EXPECT_EQ(c.stats().evictions, 2u);
  EXPECT_EQ(c.stats().budget_bytes, 6500u);
  c.clear();
  EXPECT_EQ(c.stats().bytes, 0u);
  EXPECT_EQ(c.lookup(a).tokens, 0);
}

// Snapshots that share KV pages (the turns of one conversation): each page counts once in the bytes
// held, and an eviction gives back only the pages no other entry holds.
struct PagedSnapshot final : SlotSnapshot {
  PagedSnapshot(int64_t at, uint64_t own_, std::vector<int32_t> ids_, const void* pool_) : own(own_), ids(std::move(ids_)), pool(pool_) {
    pos = at;
  }
  uint64_t bytes() const override { return own + ids.size() * kPage; }
  int64_t shared_pages() const override { return int64_t(ids.size()); }
  PageList page_list() const override { return {.pool = pool, .ids = ids, .page_bytes = kPage}; }
  static constexpr uint64_t kPage = 10000;
  uint64_t own;
  std::vector<int32_t> ids;
  const void* pool;
};

TEST(PrefixCache, SharedPagesCountOnce) {
  const auto a = seq(1000, 1);
  const int pool_a = 0, pool_b = 0;
  PrefixCache c({.budget_bytes = 100000});
  // Turn 1 at 256 tokens holds pages 0, 1; turn 2 at 512 holds 0 .. 3: 4 pages held, not 6.
  ASSERT_TRUE(c.insert(first(a, 256), std::make_shared<PagedSnapshot>(256, 100, std::vector<int32_t>{0, 1}, &pool_a)));
  EXPECT_EQ(c.stats().bytes, 100 + 4 * 256 + 2 * PagedSnapshot::kPage);
  ASSERT_TRUE(c.insert(first(a, 512), std::make_shared<PagedSnapshot>(512, 100, std::vector<int32_t>{0, 1, 2, 3}, &pool_a)));
  const uint64_t own = 2 * 100 + 4 * (256 + 512);
  EXPECT_EQ(c.stats().bytes, own + 4 * PagedSnapshot::kPage);
  // The same ids of another pool are other pages.
  ASSERT_TRUE(c.insert(first(seq(300, 2), 128), std::make_shared<PagedSnapshot>(128, 100, std::vector<int32_t>{0}, &pool_b)));
  EXPECT_EQ(c.stats().bytes, own + 100 + 4 * 128 + 5 * PagedSnapshot::kPage);
  // Turn 3 at 768 (pages 0 .. 5) adds its own 3,172 bytes and 2 new pages to the 53,884 held: 77,056
  // fits the budget, nothing is evicted (its 63,172 bytes alone would, with the 6 pages counted whole).
  ASSERT_TRUE(c.insert(first(a, 768), std::make_shared<PagedSnapshot>(768, 100, std::vector<int32_t>{0, 1, 2, 3, 4, 5}, &pool_a)));
  EXPECT_EQ(c.stats().evictions, 0u);
  const uint64_t held = own + 100 + 4 * 128 + 100 + 4 * 768 + 7 * PagedSnapshot::kPage;
  EXPECT_EQ(c.stats().bytes, held);
  // Evicting the oldest (turn 1) frees none of its pages: turns 2 and 3 hold them.
  ASSERT_TRUE(c.evict_oldest());
  EXPECT_EQ(c.stats().bytes, held - (100 + 4 * 256));
  // Turn 2 next: pages 0 .. 3 stay with turn 3.
  ASSERT_TRUE(c.evict_oldest());
  EXPECT_EQ(c.stats().bytes, held - (100 + 4 * 256) - (100 + 4 * 512));
  // The other pool's entry: its page goes with it.
  ASSERT_TRUE(c.evict_oldest());
  EXPECT_EQ(c.stats().bytes, 100 + 4 * 768 + 6 * PagedSnapshot::kPage);
  ASSERT_TRUE(c.evict_oldest());
  EXPECT_EQ(c.stats().bytes, 0u);
  EXPECT_FALSE(c.evict_oldest());
}

// Under a budget an insert evicts until its own bytes and the pages no remaining entry holds fit: an
// evicted entry's pages that the new one shares become its charge.
TEST(PrefixCache, BudgetCountsThePagesAnEvictionLeavesToTheNewEntry) {
  const auto a = seq(1000, 3);
  const int pool = 0;
  const uint64_t kP = PagedSnapshot::kPage;
  // Turn 1 (pages 0, 1) and an unrelated entry (pages 7, 8), then turn 2 (pages 0 .. 3) under a budget
  // of 5 pages and 3,000 bytes: turn 2 adds pages 2, 3 (6 pages held), so the least recent, turn 1, goes;
  PrefixCache c({.budget_bytes = 5 * kP + 3000});
  ASSERT_TRUE(c.insert(first(a, 256), std::make_shared<PagedSnapshot>(256, 0, std::vector<int32_t>{0, 1}, &pool)));
  ASSERT_TRUE(c.insert(first(seq(300, 4), 256), std::make_shared<PagedSnapshot>(256, 0, std::vector<int32_t>{7, 8}, &pool)));
  EXPECT_EQ(c.stats().bytes, 4 * kP + 2 * 4 * 256);
  ASSERT_TRUE(c.insert(first(a, 512), std::make_shared<PagedSnapshot>(512, 0, std::vector<int32_t>{0, 1, 2, 3}, &pool)));
  // that leaves pages 7, 8 and turn 2's 0 .. 3, still 6: the unrelated entry goes too.
  EXPECT_EQ(c.stats().evictions, 2u);
  EXPECT_EQ(c.stats().entries, 1u);
  EXPECT_EQ(c.stats().bytes, 4 * kP + 4 * 512);
  EXPECT_EQ(c.lookup(first(a, 600)).tokens, 512);
}

TEST(PrefixCache, AHeldSnapshotOutlivesItsEviction) {
  const auto a = seq(300, 1);
  PrefixCache c({.budget_bytes = PrefixCache::entry_bytes(*fake(128), 128)});
  std::weak_ptr<const SlotSnapshot> weak;
  {
    auto s = fake(128, 1000, 7);
    weak = s;
    ASSERT_TRUE(c.insert(first(a, 128), std::move(s)));
  }
  PrefixHit held = c.lookup(a);  // a running request restored from it
  ASSERT_TRUE(c.insert(first(seq(200, 2), 128), fake(128)));
  EXPECT_FALSE(c.contains(first(a, 128)));
  EXPECT_EQ(c.stats().evictions, 1u);
  ASSERT_FALSE(weak.expired());
  EXPECT_EQ(tag_of(held), 7);
  held = {};
  EXPECT_TRUE(weak.expired());
}

TEST(PrefixCache, BadInsertsAreOneLineErrors) {
  PrefixCache c({.budget_bytes = 1 << 20});
  const auto a = seq(300, 1);
  EXPECT_THROW(c.insert(first(a, 100), fake(100)), Error);
  EXPECT_THROW(c.insert({}, fake(0)), Error);
  EXPECT_THROW(c.insert(first(a, 128), fake(256)), Error);
  EXPECT_THROW(c.insert(first(a, 128), nullptr), Error);
  try {
    c.insert(first(a, 100), fake(100));
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "prefix cache: a prefix of 100 tokens, expected a nonzero multiple of 128");
  }
}

TEST(PrefixCache, SharedTokensNameTheBranchPoint) {
  PrefixCache c({.budget_bytes = 1 << 20});
  const auto sys = seq(300, 1);
  const auto a = concat(sys, seq(400, 2)), b = concat(sys, seq(50, 3));
  EXPECT_EQ(c.lookup(a).shared_tokens, 0);  // nothing seen yet
  const PrefixHit h = c.lookup(b);
  EXPECT_EQ(h.tokens, 0);
  EXPECT_EQ(h.shared_tokens, 256);  // agrees with a up to token 300
  EXPECT_EQ(c.lookup(a).shared_tokens, 640);  // a itself again: all its blocks up to 699
  // Remembering is bounded: with room for 2 block hashes, a's first blocks are forgotten.
  PrefixCache small({.budget_bytes = 1 << 20, .seen_blocks = 2});
  small.lookup(a);
  EXPECT_EQ(small.lookup(b).shared_tokens, 0);
}

TEST(PrefixPlan, SnapshotPoints) {
  using P = std::vector<int64_t>;
  EXPECT_EQ(snapshot_points(100, {}), P{});
  EXPECT_EQ(snapshot_points(128, {}), P{});
  EXPECT_EQ(snapshot_points(129, {}), P{128});
  EXPECT_EQ(snapshot_points(1000, {}), P{896});
  EXPECT_EQ(snapshot_points(1000, {.tokens = 896, .shared_tokens = 896}), P{});  // nothing new to keep
  EXPECT_EQ(snapshot_points(1000, {.tokens = 256, .shared_tokens = 512}), (P{512, 896}));
  EXPECT_EQ(snapshot_points(1000, {.tokens = 0, .shared_tokens = 896}), P{896});
  EXPECT_EQ(snapshot_points(1000, {.tokens = 0, .shared_tokens = 512}, PrefixSnapshots::Last), P{896});
  EXPECT_EQ(snapshot_points(700, {.tokens = 256}, PrefixSnapshots::EveryBlock), (P{384, 512, 640}));
}

TEST(PrefixPlan, ChunksEndAtSnapshotPointsAndOnTheGrid) {
  const auto c = prefill_chunks(0, 700, 256, {384, 640});
  ASSERT_EQ(c.size(), 5u);
  const int64_t want[5][2] = {{0, 256}, {256, 384}, {384, 512}, {512, 640}, {640, 700}};
  for (size_t i = 0; i < 5; ++i) {
    EXPECT_EQ(c[i].begin, want[i][0]) << i;
    EXPECT_EQ(c[i].end, want[i][1]) << i;
    EXPECT_EQ(c[i].snapshot, i == 1 || i == 3) << i;
  }
  // From a restored prefix off the grid: the grid stays where it was.
  const auto r = prefill_chunks(384, 1000, 256, {896});
  ASSERT_EQ(r.size(), 4u);
  EXPECT_EQ(r[0].end, 512);
  EXPECT_EQ(r[1].end, 768);
  EXPECT_EQ(r[2].end, 896);
  EXPECT_TRUE(r[2].snapshot);
  EXPECT_EQ(r[3].end, 1000);
  EXPECT_FALSE(r[3].snapshot);
  EXPECT_EQ(prefill_chunk_end(896, 1000, 256, {896}), 1000);
  EXPECT_THROW(prefill_chunk_end(0, 100, 0, {}), Error);
  EXPECT_THROW(prefill_chunk_end(100, 100, 64, {}), Error);
}

// ---------------------------------------------------------------- the real thing on the CPU model

// A prompt served as the engine will (runtime/prefix_reuse.h): looked up, the hit restored into
// `slot` (or a fresh start), the rest prefilled in chunks ending at the snapshot points, snapshotted there.
struct Served {
  Tensor logits;  // [prompt - hit, V]: the rows of the positions fed
  int64_t hit = 0, fed = 0;
  std::vector<int32_t> next = {};  // check(): the greedy ids after the prompt
};

Served serve(Runner& r, PrefixCache& cache, int slot, const std::vector<int32_t>& prompt, int64_t chunk,
             PrefixSnapshots policy = PrefixSnapshots::LastAndBranch) {
  Model& m = r.model();
  const int64_t L = int64_t(prompt.size()), V = m.config().vocab_size;
  PromptPrefix pp(cache, r, slot, prompt, policy);
  Served s{.logits = Tensor({L - pp.start(), V}), .hit = pp.start()};
  for (int64_t at = pp.start(), end = 0; at < L; at = end) {
    end = pp.chunk_end(at, L, chunk);
    const Tensor l = m.forward(slot, at, {prompt.begin() + at, prompt.begin() + end});
    std::copy(l.data.begin(), l.data.end(), s.logits.row(at - pp.start()));
    s.fed += end - at;
    pp.reached(prompt, end);
  }
  return s;
}

int32_t argmax(const float* row, int64_t V) { return int32_t(std::max_element(row, row + V) - row); }

// Greedy ids of `n` more tokens from the slot after a prompt of `L` tokens whose last logits row is `last`.
std::vector<int32_t> greedy(Model& m, int slot, int64_t L, const float* last, int n) {
  const int64_t V = m.config().vocab_size;
  std::vector<int32_t> ids{argmax(last, V)};
  for (int i = 1; i < n; ++i) {
    const Tensor l = m.forward(slot, L + i - 1, {ids.back()});
    ids.push_back(argmax(l.row(0), V));
  }
  return ids;
}

class PrefixReuse : public ::testing::TestWithParam<const char*> {
 protected:
  void SetUp() override {
#if defined(__SANITIZE_ADDRESS__)
    // Cold forwards of up to ~1,000 tokens per case: ~100 s each in release on 2 busy cores, far more
    // under AddressSanitizer; the engine's prefix tests (test_engine_prefix.cpp) run there on short prompts.
    GTEST_SKIP() << "the model's prefix-reuse cases are too slow under AddressSanitizer";
#endif
    const std::string name = GetParam();
    if (name != "bundled" && !test::have_shared()) GTEST_SKIP() << "no ../shared fixtures";
    m_ = Model::load(name == "bundled" ? test::bundled_model_dir() : test::fixture_dir(name) + "/model",
                     Numerics::Official);
    V_ = m_->config().vocab_size;
    runner_ = std::make_unique<Runner>(*m_);  // PromptPrefix restores through a runner: its slots 0, 1, 2
    for (int slot : {kFirst, kWarm, kCold}) ASSERT_EQ(runner_->new_sequence(), slot);
  }
  std::vector<int32_t> ids(int64_t n, int32_t seed) const {
    std::vector<int32_t> v = seq(n, seed);
    for (int32_t& x : v) x %= int32_t(V_);
    return v;
  }
  // The prompt served through the cache against a cold run of it on a fresh slot: the logits of every
  // position fed are equal bit for bit, and so are `n` greedy ids after it.
  Served check(PrefixCache& cache, const std::vector<int32_t>& prompt, int64_t chunk, int n = 3) {
    const int64_t L = int64_t(prompt.size());
    Served warm = serve(*runner_, cache, kWarm, prompt, chunk);
    const Tensor cold = m_->forward(kCold, 0, prompt);
    EXPECT_EQ(warm.fed, L - warm.hit);
    const std::vector<float> tail(cold.row(warm.hit), cold.row(L));
    EXPECT_TRUE(warm.logits.data == tail) << "prompt of " << L << " tokens from a hit of " << warm.hit;
    warm.next = greedy(*m_, kWarm, L, warm.logits.row(L - warm.hit - 1), n);
    EXPECT_EQ(warm.next, greedy(*m_, kCold, L, cold.row(L - 1), n));
    return warm;
  }
  static constexpr int kFirst = 0, kWarm = 1, kCold = 2;
  std::unique_ptr<Model> m_;
  std::unique_ptr<Runner> runner_;
  int64_t V_ = 0;
};

// A first request of 8 * 128 + 9 tokens snapshotted at every boundary; then for k = 1..8 a request
// sharing 128 k tokens with it, then 9 of its own, restored into a fresh slot: cold logits, 9 tokens fed.
TEST_P(PrefixReuse, SharedPrefixOf128kTokens) {
  PrefixCache cache({.budget_bytes = uint64_t(1) << 34});
  const auto base = ids(8 * 128 + 9, 1);
  const Served r1 = serve(*runner_, cache, kFirst, base, 256, PrefixSnapshots::EveryBlock);
  EXPECT_EQ(r1.hit, 0);
  EXPECT_EQ(cache.stats().inserts, 8u);
  for (int64_t k = 1; k <= 8; ++k) {
    const auto prompt = concat(first(base, 128 * k), ids(9, int32_t(100 + k)));
    const Served s = check(cache, prompt, 256);
    EXPECT_EQ(s.hit, 128 * k);
    EXPECT_EQ(s.fed, 9);
  }
  const PrefixCacheStats st = cache.stats();
  EXPECT_EQ(st.hits, 8u);
  EXPECT_EQ(st.hit_tokens, 128u * 36);
  EXPECT_EQ(st.miss_tokens, 8u * 128 + 9 + 8 * 9);
  const uint64_t b128 = cache.lookup(first(base, 129)).snapshot->bytes();
  const uint64_t b1024 = cache.lookup(first(base, 1025)).snapshot->bytes();
  std::printf("[ prefix  ] %s: 8 entries at 128 .. 1024 tokens hold %llu bytes; a snapshot at 128: %llu, at 1024: "
              "%llu (%.0f bytes per token)\n", GetParam(), (unsigned long long)st.bytes, (unsigned long long)b128,
              (unsigned long long)b1024, double(b1024 - b128) / 896);
}

// Multi-turn chat: turn n+1's prompt is turn n's prompt + its answer + a new message. The default plan
// (the last boundary of each prompt) makes every later turn hit the previous turn's snapshot.
TEST_P(PrefixReuse, MultiTurnHitsThePreviousTurn) {
  PrefixCache cache({.budget_bytes = uint64_t(1) << 34});
  std::vector<int32_t> prompt = ids(300, 7);
  int64_t want_hit = 0;
  for (int turn = 0; turn < 3; ++turn) {
    const Served s = check(cache, prompt, 128, 20);  // the answer: 20 greedy ids
    EXPECT_EQ(s.hit, want_hit) << "turn " << turn;
    want_hit = (int64_t(prompt.size()) - 1) / 128 * 128;
    prompt = concat(concat(prompt, s.next), ids(100, 20 + turn));
  }
  EXPECT_EQ(cache.stats().hits, 2u);
}

// Conversations sharing a system prompt: the second snapshots where it parts from the first, the third
// hits there.
TEST_P(PrefixReuse, SharedSystemPromptHitsFromTheThird) {
  PrefixCache cache({.budget_bytes = uint64_t(1) << 34});
  const auto sys = ids(280, 3);
  EXPECT_EQ(check(cache, concat(sys, ids(200, 4)), 256).hit, 0);
  EXPECT_EQ(check(cache, concat(sys, ids(200, 5)), 256).hit, 0);
  EXPECT_TRUE(cache.contains(first(sys, 256)));
  EXPECT_EQ(check(cache, concat(sys, ids(90, 6)), 256).hit, 256);
}

// A budget of about two snapshots: entries are evicted, a prompt whose prefix went recomputes it
// (fed = its length), and every output stays exact; a snapshot restored before its eviction still
// gives the cold continuation.
TEST_P(PrefixReuse, EvictionKeepsOutputsExact) {
  const auto a = ids(400, 11), b = ids(400, 12), c = ids(400, 13);
  PrefixCache probe({.budget_bytes = uint64_t(1) << 34});
  serve(*runner_, probe, kFirst, a, 256);
  const uint64_t one = probe.stats().bytes;  // one entry at 384 tokens
  PrefixCache cache({.budget_bytes = 2 * one + one / 2});
  for (const auto* p : {&a, &b}) EXPECT_EQ(check(cache, concat(*p, ids(5, 1)), 256).hit, 0);
  const PrefixHit held = cache.lookup(concat(a, ids(7, 2)));
  ASSERT_EQ(held.tokens, 384);
  EXPECT_EQ(check(cache, concat(c, ids(5, 1)), 256).hit, 0);  // evicts b (a was looked up since)
  EXPECT_EQ(cache.stats().evictions, 1u);
  const Served rb = check(cache, concat(b, ids(6, 3)), 256);  // b's prefix is gone: recomputed; evicts a
  EXPECT_EQ(rb.hit, 0);
  EXPECT_EQ(rb.fed, 406);
  EXPECT_FALSE(cache.contains(first(a, 384)));
  EXPECT_EQ(cache.stats().evictions, 2u);
  // The held snapshot of a (a request still running from it) restores exactly.
  m_->backend().restore(kWarm, *held.snapshot);
  const auto tail = ids(9, 4);
  const Tensor warm = m_->forward(kWarm, 384, tail);
  const Tensor cold = m_->forward(kCold, 0, concat(first(a, 384), tail));
  EXPECT_TRUE(warm.data == std::vector<float>(cold.row(384), cold.row(393)));
  // The comparison tells states apart: another prompt's snapshot under the same tail gives other logits.
  const PrefixHit other = cache.lookup(concat(c, ids(3, 6)));
  ASSERT_EQ(other.tokens, 384);
  m_->backend().restore(kWarm, *other.snapshot);
  EXPECT_FALSE(m_->forward(kWarm, 384, tail).data == warm.data);
  EXPECT_EQ(check(cache, concat(c, ids(8, 5)), 256).hit, 384);
}

INSTANTIATE_TEST_SUITE_P(Models, PrefixReuse, ::testing::Values("bundled", "tiny-q"),
                         [](const auto& info) { return std::string(info.param) == "tiny-q" ? "tiny_q" : "bundled"; });

}  // namespace
}  // namespace dsv4
