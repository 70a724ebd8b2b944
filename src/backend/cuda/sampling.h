// Next-token sampling on the GPU, one row of logits per sequence, with the semantics of the CPU
// Sampler (src/runtime/sampler.cpp) minus the penalties: temperature <= 0 or top-k 1 is greedy
// (argmax, ties to the lower id); otherwise the candidates are the top-k logits (ties: lower id
// first), p_i = exp(z_i / T - max / T) renormalized, cut by top-p (the shortest prefix of the sorted
// candidates with mass >= top_p; ties at the cut are all kept) and min-p (p >= min_p * p_max), and one
// draw u ~ U[0, kept mass) from Philox-4x32-10 keyed by the row's seed at counter = the row's step:
// the same (seed, step) always gives the same token. Not the CPU's draw (mt19937): the distribution
// is the same, the stream of draws is not.
//
// Per-row parameters live on the device so a captured graph replays with new values. One block per
// row; the top-k and top-p cuts are found by bitwise threshold searches over the logits' order-preserving
// keys (no sort), so the cost is ~80 passes over the row in L2.
#pragma once
#include <cstdint>

#include "backend/cuda/context.h"
#include "core/philox.h"

namespace dsv4::cuda {

struct SampleParams {
  const float* logits = nullptr;       // [rows, vocab], row stride logits_stride (fp32)
  int32_t* out = nullptr;              // [rows] chosen ids
  const float* temperature = nullptr;  // [rows]; <= 0: greedy
  const int32_t* top_k = nullptr;      // [rows] 0 = off; null = off for every row
  const float* top_p = nullptr;        // [rows] 1 = off; null = off
  const float* min_p = nullptr;        // [rows] 0 = off; null = off
  const uint64_t* seed = nullptr;      // [rows]
  const uint64_t* step = nullptr;      // [rows] Philox counter of this draw (e.g. tokens generated so far)
  // Constrained decoding: row r with masked[r] != 0 keeps only the ids whose bit (id%32 of word id/32)
  // is set in mask + r * mask_stride (every other id is treated as absent, like a NaN logit); a row
  // whose mask allows nothing gets -1. Rows with masked[r] == 0 (or masked null) never read the mask.
  const int32_t* masked = nullptr;     // [rows] nonzero: apply the row's mask; null: no row
  const uint32_t* mask = nullptr;      // [rows, mask_stride] words
  int64_t rows = 0, vocab = 0, logits_stride = 0, mask_stride = 0;
};
void sample_tokens(const DeviceContext& ctx, const SampleParams& p);

// The draw: dsv4::philox_uniform(seed, step) of core/philox.h, on the device.
}  // namespace dsv4::cuda
