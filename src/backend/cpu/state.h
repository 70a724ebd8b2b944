// The CPU backend's storage of a slot's state (DESIGN.md "State a sequence carries"): per layer the
// window ring, and for compressed layers the emitted entries plus the compressor's partial block (incl.
// the CSA overlap). Layers 0 .. L-1 the main stack, L + k MTP block k (backend/backend.h).
#pragma once
#include <cstdint>
#include <optional>
#include <vector>

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
  std::vector<float> entries;         // [n_entries, dc] emitted entries (normed, rotated, quantized)
  int64_t n_entries = 0;

  CompressorState() = default;
  CompressorState(int64_t ratio, int64_t dc, bool overlap);
  const float* entry(int64_t j) const { return entries.data() + j * dc; }
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

  SlotState(const ModelConfig& cfg, int64_t n_mtp);
};

}  // namespace dsv4
