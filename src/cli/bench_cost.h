// What one forward step must read and compute, from the config alone (for `dsv4 bench`'s GB/s and
// TFLOP/s): weight bytes per layer in the checkpoint formats (FP8 + E8M0, packed FP4 + E8M0, bf16), the
// routed experts a batch touches (expected distinct experts under uniform routing), KV bytes read at a
// context length, and matmul + attention FLOPs per token.
#pragma once
#include <cstdint>

#include "io/config.h"

namespace dsv4::cli {

struct StepCost {
  double bytes = 0;  // HBM bytes the step must read at least
  double flops = 0;  // multiply-adds x 2
};

// Decode step: B sequences, one token each, every sequence at position `pos` (pos tokens of context).
// `layers` < 0: all layers; head and embedding rows always included.
StepCost decode_cost(const ModelConfig& cfg, int64_t B, int64_t pos, int64_t layers = -1);
// Decode cost of one layer (index i) at batch B.
StepCost layer_decode_cost(const ModelConfig& cfg, int64_t i, int64_t B, int64_t pos);
// Prefill of P tokens from position 0 (logits of the last position only).
StepCost prefill_cost(const ModelConfig& cfg, int64_t P);

}  // namespace dsv4::cli
