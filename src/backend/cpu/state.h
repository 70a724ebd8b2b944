// The CPU backend's storage of a slot's state (DESIGN.md "State a sequence carries"): per layer the
// window ring and the compressors' partial blocks (incl. the CSA overlap); the emitted entries and
// indexer keys live in pages of the backend's KV page pool (backend/kv_pages.h, docs/kv-pages.md),
// reached through the slot's page table of the layer's group. Layers 0 .. L-1 the main stack, L + k MTP
// block k (backend/backend.h).
#pragma once
#include <cstdint>
#include <optional>
#include <vector>

#include "backend/kv_page_format.h"
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
  // [window] rows of head_dim in the pool's KvPageFormat (an entry's bytes each); position p lives in
  // slot p % window.
  std::vector<uint8_t> ring;
  std::optional<CompressorState> comp;      // main compressor (CSA, HCA)
  std::optional<CompressorState> idx_comp;  // indexer compressor (CSA)
};

// A fresh layer's state (what a run at position 0 starts from), its ring in format f.
LayerState make_layer_state(const ModelConfig& cfg, const LayerSpec& spec, const KvPageFormat& f);

// One row of `width` floats into / out of its stored form in format f: a main entry or ring row
// (indexer false) or an indexer key (true). Records are packed / unpacked (exact on the official grid).
void store_kv_row(const KvPageFormat& f, bool indexer, int64_t width, const float* row, uint8_t* dst);
void load_kv_row(const KvPageFormat& f, bool indexer, int64_t width, const uint8_t* src, float* row);

struct SlotState {
  std::vector<LayerState> layers;  // main stack, then the MTP blocks
  std::vector<PageTable> tables;   // [1 + MTP blocks] the page table of each layer group

  SlotState(const ModelConfig& cfg, int64_t n_mtp, const KvPageFormat& f);
};

// The CPU backend's KV page pool: the reference counts (PagePool) and each page's storage. A page of
// group g holds, for each compressed layer of g in order, its entries_per_page(ratio) main entries and
// then (CSA) as many indexer keys, each in the pool's KvPageFormat: compact records in official
// numerics (kv_page_format.h), float32 rows in reference numerics.
class CpuKvPool {
 public:
  CpuKvPool(const ModelConfig& cfg, int64_t n_mtp, int64_t capacity, Numerics numerics);
  const KvPageGeometry& geometry() const { return geo_; }
  const KvPageFormat& format() const { return fmt_; }
  PagePool& pool() { return pool_; }
  const PagePool& pool() const { return pool_; }
  int64_t page_bytes() const { return page_bytes_; }
  uint8_t* page(int32_t p);  // page p's storage (made on its first use, kept for reuse)
  // Entry j of a layer's main compressor (indexer: its key j) in the slot's table of the layer's group:
  // its bytes in the page, and its width in floats.
  uint8_t* entry(const PageTable& t, int64_t layer, bool indexer, int64_t j);
  int64_t width(int64_t layer, bool indexer) const;
  // Pages [0, n) of `t` hold every entry of their tokens: no layer of the group writes them again.
  int64_t complete_pages(const SlotState& s, int64_t group) const;

 private:
  struct LayerPages {
    int64_t group = 0, ratio = 0, main_off = -1, idx_off = -1, dc = 0, di = 0;  // offsets in bytes
  };
  KvPageGeometry geo_;
  KvPageFormat fmt_;
  std::vector<LayerPages> layers_;
  int64_t page_bytes_ = 0;
  PagePool pool_;
  std::vector<std::vector<uint8_t>> data_;  // [page id] page_bytes each
};

// The entries of one compressor of one slot, through the page table of its layer's group. Rows go in and
// out as floats; the pool's format decides what the page holds (a record round-trips the official
// numerics' rows exactly, docs/kv-records.md).
struct EntryView {
  CpuKvPool* pool = nullptr;
  PageTable* table = nullptr;
  int64_t layer = 0;
  bool indexer = false;
  int64_t width() const { return pool->width(layer, indexer); }
  // Entries [j0, j0 + n) into out [n, width()].
  void read(int64_t j0, int64_t n, float* out) const;
  // Writes entry j (width() floats), taking a fresh page for it when it opens one.
  void emit(int64_t j, int64_t ratio, const float* row);
};

}  // namespace dsv4
