// The CPU backend's copy of the weights: every tensor decoded to float32 (FP8 / FP4 dequantized
// exactly, code x scale). Built once from the checkpoint views.
#pragma once
#include <cstdint>
#include <optional>
#include <vector>

#include "core/tensor.h"
#include "io/weights.h"

namespace dsv4 {

struct HcF { Tensor fn, base, scale; };
struct CompressorF { Tensor wkv, wgate, ape, norm; };            // [c*dc, D] x2, [ratio, c*dc], [dc]
struct IndexerF { Tensor wq_b, weights_proj; CompressorF comp; };  // [HI*dI, qr], [HI, D]
struct AttentionF {
  Tensor wq_a, wq_b, wkv, wo_a, wo_b;  // dequantized [out, in]
  Tensor q_norm, kv_norm, sink;
  std::optional<CompressorF> comp;
  std::optional<IndexerF> idx;
};
struct ExpertF { Tensor w1, w2, w3; };
struct MoeF {
  Tensor gate, bias;             // [E, D], [E] (top-k layers)
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
  Tensor e_proj, h_proj, enorm, hnorm, norm;
  HcF hc_head;
};
struct CpuWeights {
  Tensor embed, head, norm;
  HcF hc_head;
  std::vector<BlockF> layers;
  std::vector<MtpF> mtp;
};

CpuWeights to_cpu_weights(const Weights& w);

}  // namespace dsv4
