#pragma once
#include <vector>

#include "core/tensor.h"
#include "io/config.h"
#include "backend/cpu/cpu_weights.h"
#include "backend/cpu/quantize.h"
#include "backend/cpu/state.h"

namespace dsv4 {

// Feeds the chunk's compressor inputs x [T, D] (positions p0..) to `st` and appends every entry whose
// block completes (into `out`, the slot's pages); entries are normed, rotated at j*ratio and put on the KV
// (or indexer) grid.
void compress_chunk(const CompressorF& w, CompressorState& st, EntryView out, const Tensor& x, int64_t p0,
                    const std::vector<float>& inv_freq, const ModelConfig& cfg, const QuantSim& q, bool indexer);

}  // namespace dsv4
