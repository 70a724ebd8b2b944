// The numerics mode at each site of the forward pass (MODEL.md §6): in `reference` every call is the
// plain float32 operation; in `official` it applies DeepSeek's rounding and quantization simulation.
#pragma once
#include <cstdint>

#include "core/tensor.h"
#include "backend/cpu/cpu_weights.h"
#include "backend/backend.h"

namespace dsv4 {

class QuantSim {
 public:
  explicit QuantSim(Numerics n) : official_(n == Numerics::Official) {}
  bool official() const { return official_; }

  // Rounds to bf16 where the reference holds a bf16 tensor.
  void bf16(float* x, int64_t n) const;
  // y[T, out] = x[T, in] . W^T. Official: when W is stored FP8/FP4, x is first quantized to e4m3
  // in 1x128 blocks (power-of-two scales); y is rounded to bf16 (bf16 weights: a bf16 GEMM).
  void linear(const LinearF& W, const Tensor& x, Tensor& y) const;
  // Unweighted RMS norm of each of H heads of width d (q after wq_b).
  void head_norm(float* q, int64_t H, int64_t d, float eps) const;
  // KV grid: the first `nope` dims snapped to FP8 in 64-blocks (window KV and main compressed entries).
  void kv(float* x, int64_t nope) const;
  // Indexer keys / queries: Hadamard then FP4 in 32-blocks.
  void indexer_key(float* x, int64_t n) const;
  void indexer_query(float* x, int64_t n) const { indexer_key(x, n); }
  // Index scores are bf16 in the reference.
  float index_score(float v) const;

 private:
  bool official_;
};

}  // namespace dsv4
