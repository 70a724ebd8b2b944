// The whole model's weights in device memory: per layer the mHC mixes, the two norms, the attention
// weights (attention_sublayer.h) and the MoE weights (moe_sublayer.h); embedding and head (head_layer.h). Built from a
// `Weights` whose views point into the checkpoint's mmap (or DummyWeights' pools): tensor by tensor,
// straight from the mapped pages to device memory, FP8 and packed FP4 kept as stored (no host copy of
// the model). A progress callback reports bytes as layers land.
#pragma once
#include <cstdint>
#include <vector>

#include "backend/cuda/attention_sublayer.h"
#include "backend/cuda/buffer.h"
#include "backend/cuda/context.h"
#include "backend/cuda/head_layer.h"
#include "backend/cuda/moe_sublayer.h"
#include "io/config.h"
#include "io/weights.h"

namespace dsv4::cuda {

struct DevHc {  // mHC mixing parameters of one sub-layer, fp32
  DeviceBuffer<float> fn;     // [(2+n)n, nD]
  DeviceBuffer<float> base;   // [(2+n)n]
  DeviceBuffer<float> scale;  // [3]
};

struct DevBlockWeights {
  DevHc hc_attn, hc_ffn;
  DeviceBuffer<float> attn_norm, ffn_norm;  // [D] fp32 (bf16 checkpoint values, upcast)
  DevAttentionWeights attn;
  DevMoeWeights ffn;
};

struct DeviceWeights {
  DevEmbedWeights embed;
  DevHeadWeights head;
  std::vector<DevBlockWeights> layers;
  uint64_t device_bytes = 0;  // what the buffers hold (after re-layout / dequantization)
};

// Any float tensor (bf16 / f16 / f32) as fp32 on the device.
DeviceBuffer<float> upload_f32(const TensorView& v);
// Any float tensor as bf16 on the device (bf16 bits copied as stored, others rounded once).
DeviceBuffer<bf16> upload_bf16(const TensorView& v);
DevHc upload_hc(const HcWeights& w);

// Uploads every layer of cfg.layers (a truncated cfg uploads only its first layers) plus embed and
// head. `progress` gets the checkpoint bytes consumed so far over `total_bytes`.
DeviceWeights upload_weights(const DeviceContext& ctx, const ModelConfig& cfg, const Weights& w,
                             uint64_t total_bytes, const LoadProgress& progress = {});

}  // namespace dsv4::cuda
