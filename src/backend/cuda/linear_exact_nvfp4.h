// The NVFP4-weight path of exact_linear (linear_exact.h): ModelOpt's routed experts (FORMATS.md 4.8) in
// the CPU twin's exact arithmetic, bit-identical to cpu::matmul on io/weights.h dequantize()'s values.
//
// Weight element (o, k) = fl32(e2m1(code) x fl32(e4m3(weight_scale[o, k/16]) x weight_scale_2)): the
// block scale is formed first, one fp32 rounding, as dequantize() does (exact for a power-of-two
// weight_scale_2; one rounding otherwise, which the kernel reproduces). The products with the
// activations (e4m3 x power-of-two scale, or bf16) are then rounded to fp32 individually — a non-
// power-of-two weight_scale_2 leaves up to 24 significant bits in the weight, so unlike the FP8
// kernels the products are not exact and no FMA or scale folding is allowed — and summed in
// cpu::matmul's eight-chain order and tree.
//
// Shape: a block of 128 threads owns 16 output rows x TT tokens (TT = 1 in the expert mode); thread
// (row r, lane j) carries chain j of row r; per 128-K slice the block stages the token tile's
// activations (fp32 values), its 16 rows' packed codes and their 8 block scales (fp32, global scale
// applied) in shared memory. Plain loads, no pipelining: a correct first version, not tuned
// (docs/cuda.md). Graph-capturable: expert ids are read on the device.
#pragma once
#include "backend/cuda/linear_exact.h"

namespace dsv4::cuda::detail {

// Checks p's NVFP4 contract (w4, w4_scales, w4_global set; in % 16 == 0; 8-byte aligned rows) and
// enqueues the kernel.
void exact_nvfp4(const DeviceContext& ctx, const ExactLinearParams& p);

}  // namespace dsv4::cuda::detail
