#include "backend/cpu/state.h"

#include <algorithm>
#include <cstring>

#include "backend/cpu/kv_record.h"
#include "core/error.h"

namespace dsv4 {

CompressorState::CompressorState(int64_t ratio_, int64_t dc_, bool overlap_)
    : ratio(ratio_), dc(dc_), overlap(overlap_) {
  const int64_t c = overlap ? 2 : 1;
  cur_a.assign(size_t(ratio * c * dc), 0.0f);
  cur_g.assign(size_t(ratio * c * dc), 0.0f);
  if (overlap) {
    prev_a.assign(size_t(ratio * dc), 0.0f);
    prev_g.assign(size_t(ratio * dc), 0.0f);
  }
}

LayerState make_layer_state(const ModelConfig& cfg, const LayerSpec& spec, const KvPageFormat& f) {
  LayerState s;
  s.ring.assign(size_t(cfg.sliding_window * f.entry_bytes), 0);
  if (spec.attn != AttnKind::Sliding) s.comp.emplace(spec.ratio, cfg.head_dim, spec.attn == AttnKind::CSA);
  if (spec.attn == AttnKind::CSA) s.idx_comp.emplace(spec.ratio, cfg.index_head_dim, true);
  return s;
}

void store_kv_row(const KvPageFormat& f, bool indexer, int64_t width, const float* row, uint8_t* dst) {
  if (!f.records)
    std::memcpy(dst, row, size_t(width) * sizeof(float));
  else if (indexer)
    cpu::pack_indexer_keys({.x = row, .records = dst, .rows = 1, .x_stride = width, .layout = f.key});
  else
    cpu::pack_kv_entries({.x = row, .records = dst, .rows = 1, .x_stride = width, .layout = f.entry});
}

void load_kv_row(const KvPageFormat& f, bool indexer, int64_t width, const uint8_t* src, float* row) {
  if (!f.records)
    std::memcpy(row, src, size_t(width) * sizeof(float));
  else if (indexer)
    cpu::unpack_indexer_keys({.records = src, .x = row, .rows = 1, .x_stride = width, .layout = f.key});
  else
    cpu::unpack_kv_entries({.records = src, .x = row, .rows = 1, .x_stride = width, .layout = f.entry});
}

SlotState::SlotState(const ModelConfig& cfg, int64_t n_mtp, const KvPageFormat& f) {
  for (int64_t i = 0; i < cfg.num_layers + n_mtp; ++i) layers.push_back(make_layer_state(cfg, cfg.layer_at(i), f));
  tables.resize(size_t(1 + n_mtp));
}

CpuKvPool::CpuKvPool(const ModelConfig& cfg, int64_t n_mtp, int64_t capacity, Numerics numerics)
    : geo_(kv_page_geometry(cfg, n_mtp)), fmt_(kv_page_format(cfg, numerics)), pool_(capacity, geo_.page_tokens) {
  std::vector<int64_t> group_bytes(size_t(1 + n_mtp), 0);
  for (int64_t i = 0; i < cfg.num_layers + n_mtp; ++i) {
    const LayerSpec s = cfg.layer_at(i);
    LayerPages l{.group = geo_.group_of(i), .ratio = s.ratio, .dc = cfg.head_dim, .di = cfg.index_head_dim};
    int64_t& off = group_bytes[size_t(l.group)];
    if (s.attn != AttnKind::Sliding) {
      const int64_t epp = geo_.entries_per_page(s.ratio);
      l.main_off = off;
      off += epp * fmt_.entry_bytes;
      if (s.attn == AttnKind::CSA) {
        l.idx_off = off;
        off += epp * fmt_.key_bytes;
      }
    }
    layers_.push_back(l);
  }
  for (int64_t b : group_bytes) page_bytes_ = std::max(page_bytes_, b);
}

uint8_t* CpuKvPool::page(int32_t p) {
  if (p < 0) fail("cpu kv pool: page ", p);
  if (size_t(p) >= data_.size()) data_.resize(size_t(p) + 1);
  std::vector<uint8_t>& d = data_[size_t(p)];
  if (d.empty()) d.assign(size_t(page_bytes_), 0);
  return d.data();
}

uint8_t* CpuKvPool::entry(const PageTable& t, int64_t layer, bool indexer, int64_t j) {
  const LayerPages& l = layers_.at(size_t(layer));
  const int64_t off = indexer ? l.idx_off : l.main_off;
  if (off < 0) fail("cpu kv pool: layer ", layer, " has no ", indexer ? "indexer keys" : "compressed entries");
  const int64_t epp = geo_.entries_per_page(l.ratio), i = j / epp;
  if (j < 0 || i >= int64_t(t.pages.size())) fail("cpu kv pool: entry ", j, " of layer ", layer, " has no page");
  return page(t.pages[size_t(i)]) + off + (j % epp) * (indexer ? fmt_.key_bytes : fmt_.entry_bytes);
}

int64_t CpuKvPool::width(int64_t layer, bool indexer) const {
  const LayerPages& l = layers_.at(size_t(layer));
  return indexer ? l.di : l.dc;
}

void EntryView::read(int64_t j0, int64_t n, float* out) const {
  const int64_t w = width();
  for (int64_t j = j0; j < j0 + n; ++j)
    load_kv_row(pool->format(), indexer, w, pool->entry(*table, layer, indexer, j), out + (j - j0) * w);
}

void EntryView::emit(int64_t j, int64_t ratio, const float* row) {
  table->ensure(pool->pool(), j * ratio / pool->geometry().page_tokens);
  store_kv_row(pool->format(), indexer, width(), row, pool->entry(*table, layer, indexer, j));
}

int64_t CpuKvPool::complete_pages(const SlotState& s, int64_t group) const {
  int64_t covered = -1;  // tokens whose entries every layer of the group has emitted
  for (size_t i = 0; i < layers_.size(); ++i) {
    if (layers_[i].group != group || layers_[i].main_off < 0) continue;
    const LayerState& st = s.layers[i];
    int64_t c = st.comp->n_entries * st.comp->ratio;
    if (st.idx_comp) c = std::min(c, st.idx_comp->n_entries * st.idx_comp->ratio);
    covered = covered < 0 ? c : std::min(covered, c);
  }
  return covered < 0 ? 0 : covered / geo_.page_tokens;
}

}  // namespace dsv4
