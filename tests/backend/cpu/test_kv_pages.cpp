// The KV page pool's bookkeeping (backend/kv_pages.h): reference counts, reuse after free, exhaustion,
// page tables, and the page geometry of a config. The pool through a backend (snapshots sharing pages,
// restore) is tested in tests/model/test_slot_snapshot.cpp (KvPages).
#include <gtest/gtest.h>

#include <string>

#include "backend/kv_pages.h"
#include "core/error.h"

namespace dsv4 {
namespace {

TEST(PagePool, AllocatesDistinctPagesAndCountsReferences) {
  PagePool pool(4, 128);
  const int32_t a = pool.alloc(), b = pool.alloc();
  EXPECT_NE(a, b);
  EXPECT_EQ(pool.used_pages(), 2);
  EXPECT_EQ(pool.free_pages(), 2);
  EXPECT_EQ(pool.refs(a), 1);
  pool.retain(a);
  pool.retain(a);
  EXPECT_EQ(pool.refs(a), 3);
  pool.release(a);
  pool.release(a);
  EXPECT_EQ(pool.refs(a), 1);
  EXPECT_EQ(pool.used_pages(), 2);  // still held once
  pool.release(a);
  EXPECT_EQ(pool.refs(a), 0);
  EXPECT_EQ(pool.used_pages(), 1);
  EXPECT_EQ(pool.refs(b), 1);
}

TEST(PagePool, AFreedPageIsReused) {
  PagePool pool(3, 128);
  const int32_t a = pool.alloc(), b = pool.alloc(), c = pool.alloc();
  pool.release(b);
  EXPECT_EQ(pool.alloc(), b);  // the freed id comes back, the pool does not grow
  pool.release(a);
  pool.release(c);
  const int32_t x = pool.alloc(), y = pool.alloc();
  EXPECT_EQ(x, c);  // last freed first
  EXPECT_EQ(y, a);
  EXPECT_EQ(pool.used_pages(), 3);
}

TEST(PagePool, ExhaustionIsAOneLineError) {
  PagePool pool(2, 128);
  pool.alloc();
  pool.alloc();
  EXPECT_EQ(pool.free_pages(), 0);
  try {
    pool.alloc();
    FAIL() << "a third page from a pool of two";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("kv page pool exhausted: all 2 pages of 128 tokens are in use"), std::string::npos) << m;
    EXPECT_EQ(m.find('\n'), std::string::npos) << m;
  }
  EXPECT_EQ(pool.used_pages(), 2);  // a failed alloc takes nothing
}

TEST(PagePool, UnboundedPoolGrows) {
  PagePool pool(0, 128);
  for (int i = 0; i < 100; ++i) EXPECT_EQ(pool.alloc(), i);
  EXPECT_EQ(pool.free_pages(), -1);
  EXPECT_EQ(pool.used_pages(), 100);
}

TEST(PagePool, ReleasingAFreePageIsAnError) {
  PagePool pool(2, 128);
  const int32_t a = pool.alloc();
  pool.release(a);
  EXPECT_THROW(pool.release(a), Error);
  EXPECT_THROW(pool.retain(a), Error);
  EXPECT_THROW(pool.retain(7), Error);
}

TEST(PageTable, EnsureTakesPagesInOrderAndReleaseAllGivesThemBack) {
  PagePool pool(8, 128);
  PageTable t;
  t.ensure(pool, 0);
  EXPECT_EQ(t.pages.size(), 1u);
  t.ensure(pool, 0);  // already there
  EXPECT_EQ(t.pages.size(), 1u);
  t.ensure(pool, 3);  // pages 1 .. 3 too
  EXPECT_EQ(t.pages.size(), 4u);
  EXPECT_EQ(pool.used_pages(), 4);
  PageTable shared = t;  // a second holder, as a snapshot is
  for (int32_t p : shared.pages) pool.retain(p);
  t.release_all(pool);
  EXPECT_TRUE(t.pages.empty());
  EXPECT_EQ(pool.used_pages(), 4);  // the second holder keeps them
  shared.release_all(pool);
  EXPECT_EQ(pool.used_pages(), 0);
}

ModelConfig config_with(std::vector<LayerSpec> layers, std::vector<LayerSpec> mtp = {}) {
  ModelConfig c;
  c.num_layers = int64_t(layers.size());
  c.layers = std::move(layers);
  c.mtp_layers = std::move(mtp);
  return c;
}

TEST(KvPageGeometry, PageTokensAreAMultipleOfEveryRatioAtLeast128) {
  const LayerSpec sw{}, csa{.attn = AttnKind::CSA, .ratio = 4}, hca{.attn = AttnKind::HCA, .ratio = 128};
  // V4's ratios 4 and 128, the bundled model's 4 and 32: 128 tokens per page.
  const KvPageGeometry v4 = kv_page_geometry(config_with({sw, csa, hca}), 0);
  EXPECT_EQ(v4.page_tokens, 128);
  EXPECT_EQ(v4.entries_per_page(4), 32);
  EXPECT_EQ(v4.entries_per_page(128), 1);
  EXPECT_EQ(kv_page_geometry(config_with({csa, {.attn = AttnKind::HCA, .ratio = 32}}), 0).page_tokens, 128);
  // lcm(4, 96) = 96: two of them.
  EXPECT_EQ(kv_page_geometry(config_with({csa, {.attn = AttnKind::HCA, .ratio = 96}}), 0).page_tokens, 192);
  EXPECT_EQ(kv_page_geometry(config_with({csa, {.attn = AttnKind::HCA, .ratio = 256}}), 0).page_tokens, 256);
}

TEST(KvPageGeometry, PagesNeededCountTheGroupsThatHoldPages) {
  const LayerSpec sw{}, csa{.attn = AttnKind::CSA, .ratio = 4};
  // A sliding MTP block holds no pages; a compressed one has its own table.
  const KvPageGeometry g1 = kv_page_geometry(config_with({sw, csa}, {sw}), 1);
  EXPECT_EQ(g1.paged_groups(), 1);
  EXPECT_EQ(g1.pages_needed(0), 0);
  EXPECT_EQ(g1.pages_needed(1), 1);
  EXPECT_EQ(g1.pages_needed(128), 1);
  EXPECT_EQ(g1.pages_needed(129), 2);
  const KvPageGeometry g2 = kv_page_geometry(config_with({sw, csa}, {csa}), 1);
  EXPECT_EQ(g2.paged_groups(), 2);
  EXPECT_EQ(g2.pages_needed(300), 6);
  EXPECT_EQ(g2.group_of(1), 0);
  EXPECT_EQ(g2.group_of(2), 1);
  EXPECT_TRUE(g2.first_of_group(0));
  EXPECT_FALSE(g2.first_of_group(1));
  EXPECT_TRUE(g2.first_of_group(2));
  EXPECT_EQ(kv_page_geometry(config_with({sw, sw}), 0).pages_needed(1000), 0);  // nothing compressed
}

}  // namespace
}  // namespace dsv4
