#pragma once
#include <vector>

#include "core/tensor.h"
#include "io/config.h"
#include "backend/cpu/cpu_weights.h"
#include "backend/cpu/quantize.h"
#include "backend/cpu/state.h"

namespace dsv4 {

// For each query t of the chunk (x [T, D] attention input, cq [T, q_lora] normed q latent), the indices
// of the top min(index_topk, visible) indexer entries among those with j < (p0+t+1)/ratio.
std::vector<std::vector<int64_t>> index_topk(const IndexerF& w, const CompressorState& keys, const EntryView& key_rows,
                                             const Tensor& x,
                                             const Tensor& cq, int64_t p0, const std::vector<float>& inv_freq,
                                             const ModelConfig& cfg, const QuantSim& q);

}  // namespace dsv4
