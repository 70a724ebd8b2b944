// Routed experts stored FP8 (Base checkpoints: e4m3 + 128x128 scales) or NVFP4 (ModelOpt: e2m1 + e4m3
// weight_scale per 16 + f32 weight_scale_2) on the GPU (FORMATS.md 1, 4.8; docs/numerics.md): one
// projection of every routed expert of a layer stacked [E, rows, K] for exact_linear's expert mode, so
// a (token, pick) selection multiplies its expert's matrix with the CPU twin's bits (linear_exact.h,
// linear_exact_nvfp4.h). w1 | w3 of an expert stack as one [2I, D] matrix (rows [0, I) = w1), each
// keeping its own weight_scale_2 (global_rows = I). Formats are taken per tensor as the loader bound
// them; one stack holds one format (w2 may differ from w1 | w3).
// The fast tier uploads the codes in fp4_grouped_decode's layouts instead (fast_layout: NVFP4 in the FP4
// tiled layout, FP8 in the FP8 tiled layout, fp4_tiled.h; the scales as above) and runs them on the tensor
// cores (fast_stack_params); exact_linear does not read that layout.
#pragma once
#include <cstdint>
#include <vector>

#include "backend/cuda/buffer.h"
#include "backend/cuda/fp4_grouped_decode.h"
#include "backend/cuda/linear_exact.h"
#include "io/weights.h"

namespace dsv4::cuda {

struct ExpertStack {
  WeightFormat format = WeightFormat::Dense;  // FP8 or NVFP4 once uploaded
  int64_t E = 0, rows = 0, K = 0;             // experts, rows per expert (all parts), K
  DeviceBuffer<uint8_t> codes;                // FP8 [E, rows, K] e4m3; NVFP4 [E, rows, K/2] e2m1 (low nibble: even k)
  DeviceBuffer<float> tile_scales;            // FP8 [E, rows/128, ceil(K/128)] fp32 (E8M0 or F32 as stored)
  bool pow2_scales = true;                    // FP8: every tile scale a power of two (see expert_stack_params)
  DeviceBuffer<uint8_t> block_scales;         // NVFP4 [E, rows, K/16] e4m3 weight_scale
  DeviceBuffer<float> global;                 // NVFP4 [E, rows / global_rows] weight_scale_2
  int64_t global_rows = 0;                    // NVFP4: rows of one part (w1, w3 or w2)
  bool fast_layout = false;                   // codes tiled for fp4_grouped_decode (fast tier)
  bool present() const { return rows > 0; }
};

// parts[e]: expert e's projections stacked in order ({w1, w3} or {w2}), each [part_rows, K]. All of one
// format, FP8 or NVFP4 (else a one-line error naming the tensor and the format found); part_rows a
// multiple of 128 (FP8 tiles stay inside a part).
ExpertStack upload_expert_stack(const std::vector<std::vector<const LinearWeight*>>& parts, int64_t part_rows,
                                int64_t K, bool fast_layout = false);

// exact_linear's weight fields for s in the expert mode (expert_ids [tokens] device); the caller sets
// the activations, outputs, tokens and x_row_div. FP8 stacks with a non-power-of-two tile scale take
// the tiled kernel (the streaming one folds the weight scale into the activations, exact only for
// powers of two).
ExactLinearParams expert_stack_params(const ExpertStack& s, const int32_t* expert_ids);

// fp4_grouped_decode's weight fields (format, w, w_scales, w_global, global_rows, w_tile_scales, out, K)
// for a fast_layout stack; the caller sets the activations, plan, tiles and outputs.
Fp4GroupedDecodeParams fast_stack_params(const ExpertStack& s);

}  // namespace dsv4::cuda
