// Philox-4x32-10: u in [0, 1) from (counter = step, key = seed), 53 random bits. The draw of both
// samplers: the GPU kernel (backend/cuda/sampling.cu, compiled for the device through DSV4_HOST_DEVICE)
// and its CPU twin cpu::sample_philox (backend/cpu/sampling.h); a GPU test checks the device's draws
// equal the host's.
#pragma once
#include <cstdint>

#include "core/host_device.h"

namespace dsv4 {

DSV4_HOST_DEVICE inline double philox_uniform(uint64_t seed, uint64_t step) {
  uint32_t c0 = uint32_t(step), c1 = uint32_t(step >> 32), c2 = 0, c3 = 0;
  uint32_t k0 = uint32_t(seed), k1 = uint32_t(seed >> 32);
  for (int r = 0; r < 10; ++r) {
    const uint64_t p0 = uint64_t(0xD2511F53u) * c0, p1 = uint64_t(0xCD9E8D57u) * c2;
    const uint32_t n0 = uint32_t(p1 >> 32) ^ c1 ^ k0, n2 = uint32_t(p0 >> 32) ^ c3 ^ k1;
    c1 = uint32_t(p1);
    c3 = uint32_t(p0);
    c0 = n0;
    c2 = n2;
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  const uint64_t bits = ((uint64_t(c0) << 32) | c1) >> 11;
  return double(bits) * (1.0 / 9007199254740992.0);
}

}  // namespace dsv4
