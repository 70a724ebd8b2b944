#include "model/quantize.h"

#include <cmath>

#include "backend/cpu/ops.h"
#include "core/dtype.h"

namespace dsv4 {

void QuantSim::bf16(float* x, int64_t n) const {
  if (!official_) return;
  for (int64_t i = 0; i < n; ++i) x[i] = round_bf16(x[i]);
}

void QuantSim::linear(const Tensor& W, const Tensor& x, Tensor& y) const {
  const int64_t T = x.dim(0), in = x.dim(1), out = W.dim(0);
  cpu::matmul(x.ptr(), T, in, W.ptr(), out, y.ptr());
}

void QuantSim::head_norm(float* q, int64_t H, int64_t d, float eps) const {
  cpu::rms_norm(q, H, d, nullptr, eps, q);
}

void QuantSim::kv(float* x, int64_t nope) const {}

void QuantSim::indexer_key(float* x, int64_t n) const {}

float QuantSim::index_score(float v) const { return official_ ? round_bf16(v) : v; }

}  // namespace dsv4
