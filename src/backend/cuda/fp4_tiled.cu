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

int64_t fp8_tiled_offset(int64_t row, int64_t k, int64_t K) {
  const int64_t b = k / 32, q = 2 * ((row % 16) / 8) + (b % 4) / 2;
  return (((row / 16) * (K / 128) + k / 128) * 4 + q) * 512 + ((row % 8) * 4 + (k % 32) / 8) * 16 + (b % 2) * 8 + k % 8;
}

// Eight bytes at a time: k % 8 == 0 starts a run that stays contiguous in both layouts.
void pack_fp8_tiled(const uint8_t* src, int64_t rows, int64_t K, uint8_t* dst) {
  check_shape("pack_fp8_tiled", rows, K);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t k = 0; k < K; k += 8) std::memcpy(dst + fp8_tiled_offset(r, k, K), src + r * K + k, 8);
}

void unpack_fp8_tiled(const uint8_t* src, int64_t rows, int64_t K, uint8_t* dst) {
  check_shape("unpack_fp8_tiled", rows, K);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t k = 0; k < K; k += 8) std::memcpy(dst + r * K + k, src + fp8_tiled_offset(r, k, K), 8);
}

}  // namespace dsv4::cuda
