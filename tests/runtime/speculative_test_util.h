// Sampling parameters of the speculative tests, spelled positionally.
#pragma once
#include <cstdint>

#include "runtime/sampler.h"

namespace dsv4::test {

inline SamplingParams sampling(float temperature, int top_k = 0, float top_p = 1, float min_p = 0, uint64_t seed = 0) {
  SamplingParams p;
  p.temperature = temperature;
  p.top_k = top_k;
  p.top_p = top_p;
  p.min_p = min_p;
  p.seed = seed;
  return p;
}

}  // namespace dsv4::test
