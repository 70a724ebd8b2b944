// RoPE helpers shared by the attention, compressor and indexer of a layer.
#pragma once
#include <cstdint>
#include <vector>

#include "backend/cpu/ops.h"
#include "io/config.h"
#include "io/rope_freq.h"  // the tables: rope_inv_freq

namespace dsv4 {

// Rotates the last 2*inv_freq.size() dims of each of `heads` vectors of width `dim`.
inline void rope_heads(float* x, int64_t heads, int64_t dim, const std::vector<float>& inv_freq, int64_t pos,
                       bool inverse) {
  const int64_t rd = int64_t(inv_freq.size()) * 2;
  for (int64_t h = 0; h < heads; ++h) cpu::rope(x + h * dim + dim - rd, inv_freq, pos, inverse);
}

}  // namespace dsv4
