// Tiny checkpoints of the other DeepSeek-V4 variants (FORMATS.md 1, 4.7, 4.8, 8.2), made from a model
// directory through dsv4's own io code: the lossless MXFP4 -> NVFP4 cast of ModelOpt, a re-quantization
// of the routed experts to FP8 (the Base layout), a 0731-style config with DSpark stages, and random
// stacks of any config (e.g. Pro-shaped). For tests (generated at test time) and by hand
// (`dsv4-variant`, tools/variant-checkpoint/README.md). Every function writes DST/config.json and
// DST/model.safetensors and throws dsv4::Error with a one-line message when it cannot.
#pragma once
#include <cstdint>
#include <string>

namespace dsv4::variants {

struct Report {
  size_t tensors = 0;   // expert projections converted (or tensors written, for synth / dspark)
  size_t inexact = 0;   // elements whose value changed (0: the conversion is lossless)
  double max_abs = 0;   // largest |new - old| over the converted elements
};

// Routed experts of the main layers (`layers.N.ffn.experts.E.w{1,2,3}`, MXFP4: I8 + `.scale`) become
// ModelOpt NVFP4: U8 codes (same bytes), e4m3 `.weight_scale` [out, in/16] = 2^(k_j - k_max + 8), f32
// `.weight_scale_2` = 2^(k_max - 8), k_max taken over w1 and w3 together (they share it), and an f32
// `.input_scale`. `mtp.*` is copied unchanged, as ModelOpt does. Throws when a block's scale lies more
// than 2^17 below the tensor's largest (not representable in e4m3, the cast would not be lossless).
Report cast_nvfp4(const std::string& src, const std::string& dst);

// Every routed expert (main layers and MTP blocks, any stored format) re-quantized to FP8 e4m3 with one
// E8M0 scale per 128x128 tile, s = 2^ceil(log2(amax / 448)) (the rule of the reference's act_quant and
// of convert.py --expert-dtype fp8), codes RNE. Per element |new - old| <= max(2^-4 |old|, 2^-10 s)
// (half an e4m3 ulp; 2^-9 s is the subnormal step). The config gets "expert_dtype": "fp8".
Report requant_fp8_experts(const std::string& src, const std::string& dst);

// The 0731 layout: `stages` DSpark stages mtp.0.. (random weights, the published tensor set of
// FORMATS.md 8.2), compress_ratios extended with one 0 per stage, num_nextn_predict_layers left at 1,
// dspark_* fields and "expert_dtype": "fp4" added. The main model's tensors are copied unchanged.
// The source must have no MTP block.
Report add_dspark(const std::string& src, const std::string& dst, int stages, uint32_t seed);

// A random checkpoint for `config_json` (config.json text): FP8 dense linears, MXFP4 routed experts,
// bf16 norms / embeddings / head, f32 mHC, one MTP block per compress_ratios tail entry. Values are
// scaled so the forward stays finite; they mean nothing.
Report synth(const std::string& config_json, const std::string& dst, uint32_t seed);

// A Pro-shaped config.json (FORMATS.md 2.2 structure at reduced width): no sliding layer, ratio 128 on
// layers 0-1 then 4 / 128 alternating, ending on 4, 3 hash layers, route scale 2.5, one MTP block.
std::string pro_like_config(int layers);

}  // namespace dsv4::variants
