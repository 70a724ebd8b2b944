// Host reference of the tiled FP4 layout (contract in fp4_tiled.h).
#include <cstring>

#include "backend/cuda/fp4_tiled.h"
#include "core/error.h"

namespace dsv4::cuda {
namespace {

void check_shape(const char* what, int64_t rows, int64_t K) {
  if (rows <= 0 || rows % 16 != 0 || K <= 0 || K % 128 != 0)
    fail(what, ": shape [", rows, ", ", K, "] needs rows % 16 == 0 and K % 128 == 0");
}

}  // namespace

int64_t fp4_tiled_offset(int64_t row, int64_t block, int word, int64_t K) {
  return (((row / 16) * (K / 128) + block / 4) * 2 + (row % 16) / 8) * 512 + ((row % 8) * 4 + word) * 16 +
         (block % 4) * 4;
}

void pack_fp4_tiled(const uint8_t* src, int64_t rows, int64_t K, uint8_t* dst) {
  check_shape("pack_fp4_tiled", rows, K);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t b = 0; b < K / 32; ++b)
      for (int w = 0; w < 4; ++w) std::memcpy(dst + fp4_tiled_offset(r, b, w, K), src + r * (K / 2) + b * 16 + w * 4, 4);
}

void unpack_fp4_tiled(const uint8_t* src, int64_t rows, int64_t K, uint8_t* dst) {
  check_shape("unpack_fp4_tiled", rows, K);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t b = 0; b < K / 32; ++b)
      for (int w = 0; w < 4; ++w) std::memcpy(dst + r * (K / 2) + b * 16 + w * 4, src + fp4_tiled_offset(r, b, w, K), 4);
}

}  // namespace dsv4::cuda
