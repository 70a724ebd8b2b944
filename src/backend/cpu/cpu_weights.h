// The CPU backend's copy of the weights: every tensor decoded to float32 (FP8 / FP4 dequantized
// exactly, code x scale). Built once from the checkpoint views.
#pragma once
#include <cstdint>
#include <climits>
#include <functional>
#include <vector>

#include "backend/comm/expert_range.h"
#include "core/tensor.h"
#include "io/weights.h"

namespace dsv4 {

// A linear weight decoded to float32 [out, in]; quant_act marks FP8 / FP4 storage, whose input the
// official numerics quantize to FP8 (the reference's linear() dispatches on the weight dtype).
struct LinearF : Tensor {
  bool quant_act = false;
  bool present() const { return !data.empty(); }
};

// The CPU backend's leaves of the one tree (io/weight_tree.h).
struct CpuLeaves : PlainNodes<CpuLeaves> {
  using Linear = LinearF;
  using Matrix = LinearF;
  using Vec = Tensor;
  using Ids = std::vector<int32_t>;  // [V * k] (hash layers)
  using Embed = Tensor;
  using Head = LinearF;
};
using HcF = HcT<CpuLeaves>;
using CompressorF = CompressorT<CpuLeaves>;
using IndexerF = IndexerT<CpuLeaves>;
using AttentionF = AttentionT<CpuLeaves>;
using ExpertF = ExpertT<CpuLeaves>;
using MoeF = MoeT<CpuLeaves>;
using BlockF = BlockT<CpuLeaves>;
using MtpF = MtpT<CpuLeaves>;
using CpuWeights = ModelT<CpuLeaves>;

// Decodes every weight; `progress` (optional) is called after each tensor. Routed experts outside
// `experts` (expert parallelism) stay empty (their bytes are still counted as done).
CpuWeights to_cpu_weights(const Weights& w, uint64_t total_bytes = 0, LoadProgress progress = {},
                          ExpertRange experts = {});

}  // namespace dsv4
