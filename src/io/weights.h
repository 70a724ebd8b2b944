// Weights: every tensor of a DeepSeek-V4 checkpoint bound to a typed field, with dtype and shape
// checked against the ModelConfig. Views point into the checkpoint's mmap (nothing is copied here).
#pragma once
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "io/config.h"
#include "io/safetensors.h"
#include "io/weight_tree.h"

namespace dsv4 {

// How a linear layer's weight is stored.
enum class WeightFormat : uint8_t {
  Dense,  // bf16 / f16 / f32 [out, in], no scale
  FP8,    // e4m3 [out, in] + scale [ceil(out/128), ceil(in/128)] (e8m0 or f32 multipliers)
  FP4,    // e2m1 packed two per byte [out, in/2] (even k in the low nibble) + e8m0 scale [out, in/32]
  NVFP4,  // ModelOpt (FORMATS.md 4.8): e2m1 packed as FP4 + e4m3 `weight_scale` [out, in/16] + f32
          // `weight_scale_2` [] (+ optional f32 `input_scale` [], read and checked, unused on Hopper)
};
const char* weight_format_name(WeightFormat f);

struct LinearWeight {
  std::string name;  // canonical name of the weight tensor
  WeightFormat format = WeightFormat::Dense;
  int64_t out = 0, in = 0;  // logical shape
  TensorView weight;        // as stored
  TensorView scale;         // FP8 / FP4: `.scale`; NVFP4: `.weight_scale`
  TensorView scale2;        // NVFP4 only: `.weight_scale_2` f32 [] (per-tensor global scale)
  TensorView input_scale;   // NVFP4 only, may be absent: `.input_scale` f32 [] (static W4A4 activation
                            // scale; dsv4 quantizes activations to FP8 1x128 instead, docs/numerics.md)
  bool present() const { return weight.data != nullptr; }
  uint64_t bytes() const { return weight.nbytes + scale.nbytes + scale2.nbytes + input_scale.nbytes; }
};

// Logical float32 values [out, in] = code x scale (exact for FP8 / FP4: every product is representable).
// NVFP4: e2m1 x (e4m3(weight_scale[i, k/16]) x weight_scale_2), the block scale formed first in fp32 as
// ModelOpt's NVFP4QTensor.dequantize does (exact when weight_scale_2 is a power of two).
Tensor dequantize(const LinearWeight& w);
// The NVFP4 global scale (weight_scale_2) of w; 0 for other formats.
float nvfp4_global_scale(const LinearWeight& w);

// io's leaves: views into the checkpoint's mmap. The tree's shape is io/weight_tree.h.
struct IoLeaves : PlainNodes<IoLeaves> {
  using Linear = LinearWeight;
  using Matrix = LinearWeight;
  using Vec = TensorView;
  using Ids = TensorView;  // int32 / int64
  using Embed = TensorView;
  using Head = LinearWeight;
};
using HcWeights = HcT<IoLeaves>;
using CompressorWeights = CompressorT<IoLeaves>;
using IndexerWeights = IndexerT<IoLeaves>;
using AttentionWeights = AttentionT<IoLeaves>;
using ExpertWeights = ExpertT<IoLeaves>;
using MoeWeights = MoeT<IoLeaves>;
using BlockWeights = BlockT<IoLeaves>;
using MtpWeights = MtpT<IoLeaves>;

// True when w1 and w3 are NVFP4 with one weight_scale_2 value, as ModelOpt writes them (the max of the
// two amaxes), so a kernel may run them as one fused GEMM.
bool w13_share_global_scale(const ExpertWeights& e);

// A DSpark drafter stage (FORMATS.md 8.2): a ratio-0 block plus, on stage 0, the projection of the
// target layers' hidden states and, on the last stage, the head-side tensors. Bound and checked; the
// drafter's forward is not implemented yet, so the CPU backend does not decode these.
struct DSparkWeights {
  BlockWeights block;
  LinearWeight main_proj;          // stage 0: [D, targets * D]
  TensorView main_norm;            // stage 0: [D]
  TensorView norm;                 // last stage: [D]
  HcWeights hc_head;               // last stage
  LinearWeight markov_w1, markov_w2;  // last stage: [V, rank] bf16 each
  TensorView confidence;           // last stage: [1, D + rank]
};

// The checkpoint's tree plus what only io holds.
struct Weights : ModelT<IoLeaves> {
  std::vector<DSparkWeights> dspark;     // or the DSpark stages mtp.0.. (config dspark_* fields)
  std::vector<std::string> unused;       // checkpoint tensors no field claimed
};

// Binds and validates every tensor. Throws dsv4::Error on the first problem, naming the tensor, its
// file, and the expected dtype/shape vs what was found. `problems`, when given, instead collects every
// problem (one line each) and binding continues where possible (for `dsv4 inspect`).
Weights bind_weights(const ModelConfig& cfg, const Checkpoint& ckpt, std::vector<std::string>* problems = nullptr);

// Progress of a load: checkpoint bytes consumed so far (backends report it as weights land).
struct LoadStatus {
  uint64_t bytes_done = 0, bytes_total = 0;
  size_t tensors_done = 0;
};
using LoadProgress = std::function<void(const LoadStatus&)>;

}  // namespace dsv4
