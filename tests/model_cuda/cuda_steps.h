// Logits of a CUDA model along a token sequence (tests/model_cuda): a prefill, then one decode step
// (CUDA graph) per token.
#pragma once
#include <algorithm>
#include <cstdint>
#include <vector>

#include "core/tensor.h"
#include "model_cuda/cuda_model.h"

namespace dsv4::cuda {

// Logits of positions P-1 .. n-1 after a prefill of P then one token per step (decode graph).
inline Tensor cuda_steps(CudaModel& m, const std::vector<int32_t>& ids, int64_t P) {
  const int64_t n = int64_t(ids.size()), V = m.config().vocab_size;
  Tensor out({n - P + 1, V});
  Tensor l = m.forward(0, 0, std::vector<int32_t>(ids.begin(), ids.begin() + P));
  std::copy(l.data.begin(), l.data.end(), out.row(0));
  for (int64_t t = P; t < n; ++t) {
    l = m.decode_step({ids[size_t(t)]}, {0}, {int32_t(t)});
    std::copy(l.data.begin(), l.data.end(), out.row(t - P + 1));
  }
  return out;
}

}  // namespace dsv4::cuda
