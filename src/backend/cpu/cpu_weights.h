// The CPU backend's copy of the weights: every tensor decoded to float32 (FP8 / FP4 dequantized
// exactly, code x scale). Built once from the checkpoint views.
#pragma once
#include <cstdint>
#include <climits>
#include <functional>
#include <optional>
#include <vector>

#include "core/tensor.h"
#include "io/weights.h"

namespace dsv4 {

// A linear weight decoded to float32 [out, in]; quant_act marks FP8 / FP4 storage, whose input the
// official numerics quantize to FP8 (the reference's linear() dispatches on the weight dtype).
struct LinearF : Tensor {
  bool quant_act = false;
};

struct HcF { Tensor fn, base, scale; };
struct CompressorF { LinearF wkv, wgate; Tensor ape, norm; };            // [c*dc, D] x2, [ratio, c*dc], [dc]
struct IndexerF { LinearF wq_b, weights_proj; CompressorF comp; };  // [HI*dI, qr], [HI, D]
struct AttentionF {
  LinearF wq_a, wq_b, wkv, wo_a, wo_b;
  Tensor q_norm, kv_norm, sink;
  std::optional<CompressorF> comp;
  std::optional<IndexerF> idx;
};
struct ExpertF { LinearF w1, w2, w3; };
struct MoeF {
  LinearF gate;                  // [E, D]
  Tensor bias;                   // [E] (top-k layers)
  std::vector<int32_t> tid2eid;  // [V * k] (hash layers)
  std::vector<ExpertF> experts;
  std::optional<ExpertF> shared;
};
struct BlockF {
  HcF hc_attn, hc_ffn;
  Tensor attn_norm, ffn_norm;
  AttentionF attn;
  MoeF ffn;
};
struct MtpF {
  BlockF block;
  LinearF e_proj, h_proj;
  Tensor enorm, hnorm, norm;
  HcF hc_head;
};
struct CpuWeights {
  Tensor embed, norm;
  LinearF head;
  HcF hc_head;
  std::vector<BlockF> layers;
  std::vector<MtpF> mtp;
};

// Routed experts a backend holds: [first, last) of every MoE layer (expert parallelism); the others stay
// empty (their bytes are still counted as done).
struct ExpertRange {
  int64_t first = 0, last = INT64_MAX;
};

// Decodes every weight; `progress` (optional) is called after each tensor.
CpuWeights to_cpu_weights(const Weights& w, uint64_t total_bytes = 0, LoadProgress progress = {},
                          ExpertRange experts = {});

}  // namespace dsv4
