// The whole model's weights in device memory: the one tree (io/weight_tree.h) over the CUDA leaves
// (DevLeaves, attention_sublayer.h): per layer the mHC mixes, the two norms, the attention node (with its
// RoPE table and compressor geometry) and the backend's MoE node (moe_sublayer.h); embedding, head,
// norm and hc_head; every MTP block of the checkpoint (MODEL.md §8; embedding and head weight shared
// with the main model: head_layer.h's views). Built from a `Weights` whose views point into the
// checkpoint's mmap (or DummyWeights' pools) by map_model: tensor by tensor, straight from the mapped
// pages to device memory, FP8 and packed FP4 kept as stored (no host copy of the model). A progress
// callback reports bytes as layers land.
#pragma once
#include <cstdint>
#include <vector>

#include "backend/cuda/attention_sublayer.h"
#include "backend/cuda/buffer.h"
#include "backend/cuda/context.h"
#include "backend/cuda/head_layer.h"
#include "backend/cuda/moe_sublayer.h"
#include "io/config.h"
#include "io/weight_tree.h"
#include "io/weights.h"

namespace dsv4::cuda {

using DevHc = HcT<DevLeaves>;
using DevBlockWeights = BlockT<DevLeaves>;
using DevMtpWeights = MtpT<DevLeaves>;  // forward layer num_layers + k, spec cfg.layer_at(num_layers + k)

struct DeviceWeights : ModelT<DevLeaves> {
  uint64_t device_bytes = 0;  // what the buffers hold (after re-layout / dequantization)
};

// Any float tensor as bf16 on the device (bf16 bits copied as stored, others rounded once).
DeviceBuffer<bf16> upload_bf16(const TensorView& v);

// Uploads every layer of cfg.layers (a truncated cfg uploads only its first layers), every MTP block of
// w.mtp, embed and head; of the routed experts only `experts` (expert parallelism). `progress` gets the
// checkpoint bytes consumed so far over `total_bytes`.
DeviceWeights upload_weights(const DeviceContext& ctx, const ModelConfig& cfg, const Weights& w,
                             uint64_t total_bytes, const LoadProgress& progress = {}, ExpertRange experts = {});

}  // namespace dsv4::cuda
