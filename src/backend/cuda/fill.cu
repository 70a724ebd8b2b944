#include "backend/cuda/check.h"
#include "backend/cuda/fill.h"
#include "backend/cuda/kernel_util.cuh"

namespace dsv4::cuda {
namespace {

// splitmix64 of (seed, index): independent of launch shape.
__device__ __forceinline__ uint64_t mix(uint64_t seed, uint64_t i) {
  uint64_t z = seed + (i + 1) * 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

enum class Kind { Bytes, E4m3, Pow2, Bf16 };

template <Kind K>
__global__ void fill_kernel(void* p, size_t n, uint64_t seed, int a, int b, float scale) {
  for (size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    const uint64_t r = mix(seed, i);
    if constexpr (K == Kind::Bytes) {
      static_cast<uint8_t*>(p)[i] = uint8_t(a + int(r % uint64_t(b - a + 1)));
    } else if constexpr (K == Kind::E4m3) {
      uint8_t c = uint8_t(r);
      if ((c & 0x7f) == 0x7f) c ^= 1;  // 0x7f / 0xff are NaN
      static_cast<uint8_t*>(p)[i] = c;
    } else if constexpr (K == Kind::Pow2) {
      const int e = a + int(r % uint64_t(b - a + 1));
      static_cast<float*>(p)[i] = __uint_as_float(uint32_t(e + 127) << 23);
    } else {
      const float u = float(r >> 40) * (1.0f / 16777216.0f);  // [0, 1)
      static_cast<__nv_bfloat16*>(p)[i] = __float2bfloat16_rn((2.0f * u - 1.0f) * scale);
    }
  }
}

template <Kind K>
void launch(const DeviceContext& ctx, void* p, size_t n, uint64_t seed, int a, int b, float scale) {
  if (n == 0) return;
  const int threads = 256;
  const int grid = int(std::min<size_t>((n + threads - 1) / threads, size_t(ctx.sm_count()) * 32));
  fill_kernel<K><<<grid, threads, 0, ctx.stream()>>>(p, n, seed, a, b, scale);
  DSV4_CUDA_CHECK_LAUNCH();
}

}  // namespace

void fill_random_bytes(const DeviceContext& ctx, uint8_t* p, size_t n, uint64_t seed, uint8_t lo, uint8_t hi) {
  if (lo > hi) fail("fill_random_bytes: empty range [", int(lo), ", ", int(hi), "]");
  launch<Kind::Bytes>(ctx, p, n, seed, lo, hi, 0.0f);
}
void fill_random_e4m3(const DeviceContext& ctx, uint8_t* p, size_t n, uint64_t seed) {
  launch<Kind::E4m3>(ctx, p, n, seed, 0, 0, 0.0f);
}
void fill_random_pow2(const DeviceContext& ctx, float* p, size_t n, uint64_t seed, int emin, int emax) {
  if (emin > emax || emin < -126 || emax > 127) fail("fill_random_pow2: bad exponent range [", emin, ", ", emax, "]");
  launch<Kind::Pow2>(ctx, p, n, seed, emin, emax, 0.0f);
}
void fill_random_bf16(const DeviceContext& ctx, __nv_bfloat16* p, size_t n, uint64_t seed, float scale) {
  launch<Kind::Bf16>(ctx, p, n, seed, 0, 0, scale);
}

}  // namespace dsv4::cuda
