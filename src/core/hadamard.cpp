#include "core/hadamard.h"

#include <cmath>

#include "core/dtype.h"
#include "core/error.h"

namespace dsv4 {
namespace {

void check_pow2(int64_t n) {
  if (n < 1 || (n & (n - 1)) != 0) fail("hadamard: length must be a power of two, got ", n);
}

}  // namespace

float hadamard_scale(int64_t n) {
  check_pow2(n);
  return float(std::pow(double(n), -0.5));
}

void hadamard_inplace(float* x, int64_t n) {
  float scale = hadamard_scale(n);
  for (int64_t stride = 1; stride < n; stride <<= 1) {
    for (int64_t base = 0; base < n; base += 2 * stride) {
      for (int64_t j = base; j < base + stride; ++j) {
        float a = x[j], b = x[j + stride];
        x[j] = a + b;
        x[j + stride] = a - b;
      }
    }
  }
  for (int64_t i = 0; i < n; ++i) x[i] *= scale;
}

void hadamard_bf16_inplace(float* x, int64_t n) {
  check_pow2(n);
  for (int64_t i = 0; i < n; ++i) x[i] = round_bf16(x[i]);
  hadamard_inplace(x, n);
  for (int64_t i = 0; i < n; ++i) x[i] = round_bf16(x[i]);
}

}  // namespace dsv4
