#include "backend/cpu/quantize.h"

#include <cmath>

#include "backend/cpu/ops.h"
#include "core/dtype.h"
#include "core/hadamard.h"
#include "core/quant.h"

namespace dsv4 {

void QuantSim::bf16(float* x, int64_t n) const {
  if (!official_) return;
  for (int64_t i = 0; i < n; ++i) x[i] = round_bf16(x[i]);
}

void QuantSim::linear(const LinearF& W, const Tensor& x, Tensor& y) const {
  const int64_t T = x.dim(0), in = x.dim(1), out = W.dim(0);
  if (official_ && W.quant_act) {
    // e4m3 codes x power-of-two scales are exact in float: the FP8 GEMM becomes an fp32 GEMM on them.
    Tensor xq = x;
    fp8_sim(xq.ptr(), xq.numel(), kFp8LinearBlock);
    cpu::matmul(xq.ptr(), T, in, W.ptr(), out, y.ptr());
  } else {
    cpu::matmul(x.ptr(), T, in, W.ptr(), out, y.ptr());
  }
  bf16(y.ptr(), y.numel());
}

void QuantSim::head_norm(float* q, int64_t H, int64_t d, float eps) const {
  if (!official_) return cpu::rms_norm(q, H, d, nullptr, eps, q);
  // The reference does this on a bf16 tensor: q *= rsqrt(mean(q^2) + eps), every op rounding to bf16.
  for (int64_t h = 0; h < H; ++h) {
    float* v = q + h * d;
    float sum = 0;
    for (int64_t i = 0; i < d; ++i) sum += round_bf16(v[i] * v[i]);
    const float mean = round_bf16(sum / float(d));
    const float r = round_bf16(1.0f / std::sqrt(round_bf16(mean + eps)));
    for (int64_t i = 0; i < d; ++i) v[i] = round_bf16(v[i] * r);
  }
}

void QuantSim::kv(float* x, int64_t nope) const {
  if (official_) fp8_sim(x, nope, kFp8KvBlock);
}

void QuantSim::indexer_key(float* x, int64_t n) const {
  if (!official_) return;
  hadamard_bf16_inplace(x, n);
  fp4_sim(x, n, kFp4Block);
}

float QuantSim::index_score(float v) const { return official_ ? round_bf16(v) : v; }

}  // namespace dsv4
