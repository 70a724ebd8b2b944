// The CPU backend's storage of a slot's state (DESIGN.md "State a sequence carries"): per layer the
// window ring and the compressors' partial blocks (incl. the CSA overlap); the emitted entries and
// indexer keys live in pages of the backend's KV page pool (backend/kv_pages.h, docs/kv-pages.md),
// reached through the slot's page table of the layer's group. Layers 0 .. L-1 the main stack, L + k MTP
// block k (backend/backend.h).
#pragma once
#include <cstdint>
#include <optional>
#include <vector>

#include "backend/kv_pages.h"
#include "io/config.h"

namespace dsv4 {

// A compressor's running state. Block j covers tokens [j*ratio, (j+1)*ratio).
struct CompressorState {
  int64_t ratio = 0;  // m
  int64_t dc = 0;     // entry width
  bool overlap = false;  // CSA: each entry also pools the A-half of the previous block
  std::vector<float> cur_a, cur_g;    // [ratio, c*dc] current block's projections (gate has ape added)
  std::vector<float> prev_a, prev_g;  // [ratio, dc] A-halves of the previous complete block (overlap)
  bool have_prev = false;
  int64_t n_entries = 0;              // entries emitted (they are in the pool's pages)

  CompressorState() = default;
  CompressorState(int64_t ratio, int64_t dc, bool overlap);
  uint64_t bytes() const { return (cur_a.size() + cur_g.size() + prev_a.size() + prev_g.size()) * sizeof(float); }
};

struct LayerState {
  std::vector<float> ring;  // [window, head_dim]; position p lives in slot p % window
  std::optional<CompressorState> comp;      // main compressor (CSA, HCA)
  std::optional<CompressorState> idx_comp;  // indexer compressor (CSA)
};

// A fresh layer's state (what a run at position 0 starts from).
LayerState make_layer_state(const ModelConfig& cfg, const LayerSpec& spec);

struct SlotState {
  std::vector<LayerState> layers;  // main stack, then the MTP blocks
  std::vector<PageTable> tables;   // [1 + MTP blocks] the page table of each layer group

  SlotState(const ModelConfig& cfg, int64_t n_mtp);
};

// The CPU backend's KV page pool: the reference counts (PagePool) and each page's float32 storage. A
// page of group g holds, for each compressed layer of g in order, its entries_per_page(ratio) main
// entries [., head_dim] and then (CSA) as many indexer keys [., index_head_dim].
class CpuKvPool {
 public:
  CpuKvPool(const ModelConfig& cfg, int64_t n_mtp, int64_t capacity);
  const KvPageGeometry& geometry() const { return geo_; }
  PagePool& pool() { return pool_; }
  const PagePool& pool() const { return pool_; }
  int64_t page_floats() const { return page_floats_; }
  float* page(int32_t p);  // page p's storage (made on its first use, kept for reuse)
  // Entry j of a layer's main compressor (indexer: its key j) in the slot's table of the layer's group.
  float* entry(const PageTable& t, int64_t layer, bool indexer, int64_t j);
  // Pages [0, n) of `t` hold every entry of their tokens: no layer of the group writes them again.
  int64_t complete_pages(const SlotState& s, int64_t group) const;

 private:
  struct LayerPages {
    int64_t group = 0, ratio = 0, main_off = -1, idx_off = -1, dc = 0, di = 0;
  };
  KvPageGeometry geo_;
  std::vector<LayerPages> layers_;
  int64_t page_floats_ = 0;
  PagePool pool_;
  std::vector<std::vector<float>> data_;  // [page id] page_floats each
};

// The entries of one compressor of one slot, through the page table of its layer's group.
struct EntryView {
  CpuKvPool* pool = nullptr;
  PageTable* table = nullptr;
  int64_t layer = 0;
  bool indexer = false;
  const float* at(int64_t j) const { return pool->entry(*table, layer, indexer, j); }
  // Entry j's storage, taking a fresh page for it when it opens one.
  float* emit(int64_t j, int64_t ratio) {
    table->ensure(pool->pool(), j * ratio / pool->geometry().page_tokens);
    return pool->entry(*table, layer, indexer, j);
  }
};

}  // namespace dsv4
