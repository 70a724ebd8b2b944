// --dummy-weights: a `Weights` with the exact checkpoint formats and shapes of a config (FP8 e4m3 +
// E8M0 128x128 scales for the dense projections, packed FP4 + E8M0 1x32 for the routed experts, bf16
// for embed / head / norms / compressors / router, f32 for mHC, sinks, ape, bias; int32 tid2eid),
// random values, no checkpoint. The views point into a few host pools of random data, one per format,
// each as large as the largest tensor of that format: every tensor of a format shares the same bytes
// (values are random but repeat across tensors), so a 14 GB model costs ~1 GB of host memory and
// reuses the normal upload path (device_weights.h).
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "io/config.h"
#include "io/weights.h"

namespace dsv4 {

// Every TensorView of a Weights (linear weights and scales, norms, mHC, router tables, MTP blocks).
void for_each_view(Weights& w, const std::function<void(TensorView&)>& fn);
void for_each_view(const Weights& w, const std::function<void(const TensorView&)>& fn);
uint64_t weights_bytes(const Weights& w);  // sum of nbytes over every view

class DummyWeights {
 public:
  // Shapes from cfg (main stack only, no MTP block); value streams from seed.
  DummyWeights(const ModelConfig& cfg, uint64_t seed = 1234);
  DummyWeights(const DummyWeights&) = delete;
  DummyWeights& operator=(const DummyWeights&) = delete;

  const Weights& weights() const { return w_; }
  uint64_t total_bytes() const { return weights_bytes(w_); }

 private:
  Weights w_;
  std::vector<std::vector<uint8_t>> pools_;  // one per DType used
};

}  // namespace dsv4
