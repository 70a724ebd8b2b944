// The backend sampler's CPU twin (the GPU's is backend/cuda/sampling.h): one row's draw u =
// Philox(seed, step), no penalties.
#pragma once
#include <cstdint>

#include "backend/backend.h"

namespace dsv4::cpu {

// Greedy (temperature <= 0 or top-k 1: the first maximum); else the candidates sorted by logit (ties:
// lower id) cut by top-k, top-p (the shortest prefix with mass >= top_p, plus the candidates tied with
// its last logit) and min-p, then u = philox_uniform(seed, step) x kept mass walked over the kept ids
// in increasing id order (the kernel's walk). With r.mask the candidates are only the ids it allows
// (-1 when it allows none); NaN logits are never candidates.
int32_t sample_philox(const float* logits, int64_t vocab, const SampleRow& r);

}  // namespace dsv4::cpu
