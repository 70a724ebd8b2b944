// The few-token path of exact_linear (linear_exact.h): same contract and bit-identical results, shaped
// for decode steps (weight streaming at HBM speed instead of the tiled kernel's per-slice block syncs).
//
// Why it can be fast and still exact: cpu::matmul's association is eight chains (k = j mod 8, ascending k)
// and a fixed tree. A chain is serial, but every product is exact in fp32 (e4m3 x power-of-two scale, or
// bf16 x bf16), so a chain may be evaluated as fma(w_code, x * w_scale, acc): the weight tile's scale
// is folded into the activations once per block. Thread (row r, lane j) owns chain j of row r; a block
// is 2 warps x 4 rows; each warp streams its 4 rows through its own cp.async ring of 512-byte slices
// (8 slices in flight, no block barrier in the loop); the block's activations sit in shared memory once,
// chain-major ([token][j][i] = x[token][8i + j] x scale), read as float4. Zero padding past K adds
// +0 to a chain that is never -0, which changes nothing.
#pragma once
#include "backend/cuda/linear_exact.h"

namespace dsv4::cuda::detail {

// True when exact_gemv can take p (checked contract of exact_linear assumed): the grid fits and the
// activations of at least one token fit in shared memory.
bool exact_gemv_fits(const ExactLinearParams& p);
void exact_gemv(const DeviceContext& ctx, const ExactLinearParams& p);

}  // namespace dsv4::cuda::detail
