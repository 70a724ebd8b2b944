// The memory plan before loading (issue 16): from the ModelConfig and the checkpoint's tensors, the
// bytes each GPU needs for N GPUs under expert parallelism — routed experts split evenly (GPU g holds
// experts [g E / N, (g + 1) E / N) of every MoE layer), everything else replicated, attention
// data-parallel (each GPU the state of its own ceil(sequences / N) sequences) — and the check that
// fails at once, with one line naming what is needed and what the GPU has, instead of an
// out-of-memory deep in a load.
//
// Weights are counted as the GPU holds them (src/model_cuda upload_weights, 2026-12-01), which is not
// always as stored: FP8 linears keep their codes plus fp32 128x128 scales (rows padded to 4 blocks),
// packed FP4 experts stay as stored, dense linears and the ones the GPU runs as bf16 matmuls (wo_a,
// the compressors' wkv / wgate, the indexer's weights_proj, the router, embed, head) take 2 bytes per
// value (but wo_a in the fast tier: its FP8 codes, wo_a_as_codes), norms / mHC / sinks / ape / bias fp32,
// tid2eid int32, plus each layer's RoPE table. KV follows AttentionLayerState
// (src/backend/cuda/attention_sublayer.h) exactly; the workspace is an estimate of the per-call buffers
// (attention, MoE, residual streams, logits, cuBLASLt, the fast tier's bf16 rows of wo_a) plus, on
// several GPUs, the expert-parallel dispatch and combine buffers.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "io/config.h"
#include "io/weights.h"

namespace dsv4 {

struct WeightInventory {
  uint64_t replicated = 0;  // bytes on every GPU: embed, head, attention, routers, shared experts, norms, mHC
  // [MoE block][expert]: bytes of each routed expert (w1 + w2 + w3) on the GPU; blocks are the main
  // layers, then the MTP blocks / DSpark stages present.
  std::vector<std::vector<uint64_t>> experts;
  uint64_t stored = 0;      // the same tensors as stored in the checkpoint
  int64_t mtp_blocks = 0;   // MTP blocks present (the GPU holds their weights, state and input buffers)
  bool wo_a_codes = false;  // wo_a counted as its FP8 codes (the CUDA fast tier): the plan adds the bf16 scratch
  uint64_t routed() const;  // sum of `experts`
  uint64_t total() const { return replicated + routed(); }
};

// From a bound checkpoint (bind_weights): every tensor it found, MTP blocks and DSpark stages included.
// `fast_tier`: as the CUDA fast tier holds them (wo_a as its FP8 codes and scales instead of a bf16 matrix
// where wo_a_as_codes: backend/cuda/attention_sublayer.h).
WeightInventory weight_inventory(const ModelConfig& cfg, const Weights& w, bool fast_tier = false);
// From the config alone, in the published formats (FORMATS.md §3: FP8 e4m3 + E8M0 128x128 for the dense
// projections, shared experts and MTP projections, packed FP4 + E8M0 1x32 routed experts, bf16 embed /
// head / norms / router / compressors / indexer weights_proj, fp32 mHC / sinks / ape / bias, I64
// tid2eid), with the config's MTP blocks: what `--preset` describes. Throws for a DSpark config.
WeightInventory published_weight_inventory(const ModelConfig& cfg, bool fast_tier = false);

// Whether the CUDA fast tier holds this wo_a as its FP8 codes and scales (half the bytes of the bf16 matrix
// the exact tier holds): an FP8 checkpoint whose o_lora_rank and group inputs (num_heads * head_dim /
// o_groups) are whole 128 x 128 scale blocks (fast_gemv reads a group's scales from its first row's block).
bool wo_a_as_codes(const ModelConfig& cfg, const LinearWeight& wo_a);
// The bf16 wo_a rows the fast tier widens the codes into for calls above fast_gemv's tokens, a few groups
// at a time so that the rows written stay in L2 for the GEMM that reads them: the most groups dividing
// o_groups whose bf16 rows [groups * o_lora_rank, num_heads * head_dim / o_groups] fit kWoaScratchMaxBytes
// (at least one; Flash and Pro: 4 groups, 32 MiB), and their bytes: part of the workspace where the
// inventory's wo_a_codes holds.
inline constexpr uint64_t kWoaScratchMaxBytes = uint64_t(32) << 20;
int64_t wo_a_scratch_groups(const ModelConfig& cfg);
uint64_t wo_a_scratch_bytes(const ModelConfig& cfg);

struct MemoryPlanOptions {
  int gpus = 1;
  int64_t context = 4096;   // positions per sequence
  int64_t sequences = 1;    // sequences held at once, over all GPUs
  int64_t max_tokens = 256; // tokens per forward call (prefill chunk; at least the decode batch)
};

struct GpuPlan {
  int gpu = 0;
  int64_t first_expert = 0, experts = 0;  // routed experts [first, first + experts) of every MoE block
  int64_t sequences = 0;                  // state slots on this GPU
  uint64_t weights = 0, kv = 0, workspace = 0;
  uint64_t total() const { return weights + kv + workspace; }
};

struct MemoryPlan {
  MemoryPlanOptions options;
  std::vector<GpuPlan> gpus;   // one per GPU
  const GpuPlan& largest() const;  // the GPU that needs the most
};

// Throws dsv4::Error on options out of range (gpus < 1 or more GPUs than routed experts, context,
// sequences or max_tokens < 1).
MemoryPlan plan_memory(const ModelConfig& cfg, const WeightInventory& w, const MemoryPlanOptions& o);

// KV and compressor state of the main stack and `mtp_blocks` MTP blocks (forward layers num_layers + k,
// cfg.layer_at) for `seqs` state slots of `context` positions and calls of up to `max_tokens` tokens:
// the bytes the AttentionLayerStates of every layer allocate.
uint64_t kv_bytes(const ModelConfig& cfg, int64_t seqs, int64_t context, int64_t max_tokens, int64_t mtp_blocks = 0);
// The workspace estimate of one GPU of `gpus` (see above); with an MTP block also its input buffers
// (MtpWorkspace, src/backend/cuda/mtp_layer.h).
uint64_t workspace_bytes(const ModelConfig& cfg, int gpus, int64_t seqs, int64_t context, int64_t max_tokens,
                         bool mtp = false);

// The plan for o, checked against `gpu_bytes` (the memory one GPU has free). Throws a one-line
// dsv4::Error when the largest GPU's share does not fit:
//   "needs 151.20 GiB per GPU on 1 GPU(s) (weights 148.90, KV 2.00, workspace 0.30), the GPU has
//    139.70 GiB; use --gpus 2"
// (the hint names the fewest GPUs that fit, or says that no number of GPUs does).
MemoryPlan check_memory(const ModelConfig& cfg, const WeightInventory& w, const MemoryPlanOptions& o,
                        uint64_t gpu_bytes);

double gib(uint64_t bytes);  // bytes / 2^30

}  // namespace dsv4
