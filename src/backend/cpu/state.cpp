#include "backend/cpu/state.h"

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

LayerState make_layer_state(const ModelConfig& cfg, const LayerSpec& spec) {
  LayerState s;
  s.ring.assign(size_t(cfg.sliding_window * cfg.head_dim), 0.0f);
  if (spec.attn != AttnKind::Sliding) s.comp.emplace(spec.ratio, cfg.head_dim, spec.attn == AttnKind::CSA);
  if (spec.attn == AttnKind::CSA) s.idx_comp.emplace(spec.ratio, cfg.index_head_dim, true);
  return s;
}

SlotState::SlotState(const ModelConfig& cfg, int64_t n_mtp) {
  for (int64_t i = 0; i < cfg.num_layers + n_mtp; ++i) layers.push_back(make_layer_state(cfg, cfg.layer_at(i)));
}

}  // namespace dsv4
