// Paged pools of compressed KV entries and indexer keys (docs/kv-pages.md), the bookkeeping both backends
// share: the page geometry of a config, the pool's reference counts, and per-sequence page tables.
//
// A page holds `page_tokens` tokens of context of every compressed layer of one layer group: for layer l
// of ratio m_l, its page_tokens / m_l main entries (CSA, HCA) and, for CSA, as many indexer keys.
// Group 0 is the main stack, group 1 + k MTP block k (its own positions, so its own table); a group
// without compressed layers holds no pages. page_tokens is the smallest multiple of every ratio of the
// config that is at least kKvPageMinTokens (128 for every published config and the bundled model), so
// a prefix snapshot at a multiple of 128 tokens ends on a page boundary.
//
// Entries are append-only: page i of a sequence covers entries of tokens [i * page_tokens, (i + 1) *
// page_tokens), complete once the sequence has fed those tokens, and never written again. So a snapshot
// shares the complete pages (reference counts) and copies only the partial last one; restore shares them
// again and copies the partial one into a fresh page. Pages are taken as entries are emitted, given back
// when the last holder (slot or snapshot) lets go of them.
//
// Thread safety: PagePool locks one mutex (a snapshot may be dropped by the thread of a prefix cache).
#pragma once
#include <algorithm>
#include <cstdint>
#include <mutex>
#include <numeric>
#include <vector>

#include "core/error.h"
#include "io/config.h"

namespace dsv4 {

constexpr int64_t kKvPageMinTokens = 128;

// Where a config's compressed entries go in a page.
struct KvPageGeometry {
  int64_t page_tokens = kKvPageMinTokens;
  int64_t num_layers = 0;          // the main stack's layers (layer num_layers + k is MTP block k)
  std::vector<bool> group_paged;   // [1 + MTP blocks] the group has compressed layers
  int64_t group_of(int64_t layer) const { return layer < num_layers ? 0 : 1 + (layer - num_layers); }
  bool first_of_group(int64_t layer) const { return layer == 0 || layer >= num_layers; }
  int64_t paged_groups() const { return std::count(group_paged.begin(), group_paged.end(), true); }
  int64_t pages_for(int64_t tokens) const { return (tokens + page_tokens - 1) / page_tokens; }
  // Pages one sequence of `tokens` tokens holds (every paged group).
  int64_t pages_needed(int64_t tokens) const { return paged_groups() * pages_for(tokens); }
  int64_t entries_per_page(int64_t ratio) const { return page_tokens / ratio; }
};

inline KvPageGeometry kv_page_geometry(const ModelConfig& cfg, int64_t n_mtp) {
  KvPageGeometry g;
  g.num_layers = cfg.num_layers;
  g.group_paged.assign(size_t(1 + n_mtp), false);
  int64_t l = 1;
  for (int64_t i = 0; i < cfg.num_layers + n_mtp; ++i) {
    const LayerSpec s = cfg.layer_at(i);
    if (s.attn == AttnKind::Sliding) continue;
    if (s.ratio <= 0) fail("kv pages: layer ", i, " has compress ratio ", s.ratio);
    l = std::lcm(l, s.ratio);
    g.group_paged[size_t(g.group_of(i))] = true;
  }
  g.page_tokens = (kKvPageMinTokens + l - 1) / l * l;
  return g;
}

// Reference counts of `capacity` pages (0: unbounded, ids grow as needed). Ids are 0 .. capacity-1; a
// freed id is the next one handed out (last freed first).
class PagePool {
 public:
  PagePool(int64_t capacity, int64_t page_tokens) : capacity_(capacity), page_tokens_(page_tokens) {
    if (capacity < 0) fail("kv page pool: ", capacity, " pages");
  }
  // A fresh page (reference count 1). Throws when every page is in use.
  int32_t alloc() {
    std::lock_guard<std::mutex> lk(mu_);
    if (free_.empty()) {
      if (capacity_ > 0 && int64_t(refs_.size()) >= capacity_)
        fail("kv page pool exhausted: all ", capacity_, " pages of ", page_tokens_,
             " tokens are in use (admit fewer tokens or raise the pool's pages)");
      refs_.push_back(0);
      free_.push_back(int32_t(refs_.size() - 1));
    }
    const int32_t p = free_.back();
    free_.pop_back();
    refs_[size_t(p)] = 1;
    ++used_;
    return p;
  }
  void retain(int32_t p) {
    std::lock_guard<std::mutex> lk(mu_);
    check(p);
    ++refs_[size_t(p)];
  }
  void release(int32_t p) {
    std::lock_guard<std::mutex> lk(mu_);
    check(p);
    if (--refs_[size_t(p)] == 0) {
      free_.push_back(p);
      --used_;
    }
  }
  int32_t refs(int32_t p) const {
    std::lock_guard<std::mutex> lk(mu_);
    return p >= 0 && size_t(p) < refs_.size() ? refs_[size_t(p)] : 0;
  }
  int64_t used_pages() const {
    std::lock_guard<std::mutex> lk(mu_);
    return used_;
  }
  int64_t capacity() const { return capacity_; }
  // Pages alloc can still hand out (-1: unbounded).
  int64_t free_pages() const {
    std::lock_guard<std::mutex> lk(mu_);
    return capacity_ == 0 ? -1 : capacity_ - used_;
  }
  int64_t page_tokens() const { return page_tokens_; }

 private:
  void check(int32_t p) const {
    if (p < 0 || size_t(p) >= refs_.size() || refs_[size_t(p)] <= 0) fail("kv page pool: page ", p, " is not in use");
  }
  int64_t capacity_, page_tokens_;
  mutable std::mutex mu_;
  std::vector<int32_t> refs_;  // [pages made so far]
  std::vector<int32_t> free_;  // ids with reference count 0, the next one last
  int64_t used_ = 0;
};

// The pages of one sequence's layer group, page i covering tokens [i * page_tokens, (i + 1) * page_tokens).
struct PageTable {
  std::vector<int32_t> pages;
  // Makes page `index` exist (taking fresh pages for it and any before it).
  void ensure(PagePool& pool, int64_t index) {
    while (int64_t(pages.size()) <= index) pages.push_back(pool.alloc());
  }
  void release_all(PagePool& pool) {
    for (int32_t p : pages) pool.release(p);
    pages.clear();
  }
};

}  // namespace dsv4
