// Walsh-Hadamard transform of the reference's `rotate_activation` (MODEL.md §4.3, §6).
//
// The reference calls `fast_hadamard_transform.hadamard_transform(x, scale=n ** -0.5)` (Dao-AILab CUDA
// library) on a bf16 tensor along its last dim (n = 128 for the indexer). That kernel:
//   1. loads bf16 and widens to fp32 (exact);
//   2. runs the radix-2 butterflies in fp32, (a, b) -> (a + b, a - b) with a the lower index, at
//      strides 1, 2, 4, ..., n/2 in that order (within a thread, then across lanes, then across warps
//      and chunks: always lowest index bit first);
//   3. multiplies every result by the fp32 scale fl32(n ** -0.5) (Python double, passed as float);
//   4. rounds to bf16 (RNE) on store.
// Un-normalized, the butterflies compute y = H x with H the Sylvester matrix
// H_1 = [1], H_2m = [[H_m, H_m], [H_m, -H_m]] (H[i][j] = (-1)^popcount(i & j)), which is symmetric, so
// y = x H as in the pure-torch fallback. Since fp32 additions do not associate, the stage order above
// is part of the numerics: with it this CPU code matches the CUDA library bit for bit (fp32 subnormal
// intermediates aside, which a flush-to-zero build of the library would zero).
//
// n must be a power of two >= 1, else dsv4::Error. No random sign flips (the reference docstring's
// "randomized" is not what the code does).
#pragma once
#include <cstdint>

namespace dsv4 {

// fl32(double(n) ** -0.5): the normalization the reference passes to the CUDA kernel.
float hadamard_scale(int64_t n);

// In place, fp32 throughout: butterflies in the order above, then each element times hadamard_scale(n).
void hadamard_inplace(float* x, int64_t n);

// The reference's bf16 -> bf16 version: inputs rounded to bf16 (a no-op for bf16 values), then
// hadamard_inplace's fp32 arithmetic, then each output rounded to bf16 (RNE).
void hadamard_bf16_inplace(float* x, int64_t n);

}  // namespace dsv4
