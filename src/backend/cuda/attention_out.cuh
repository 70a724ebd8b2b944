// The sparse attention kernels' output pairs (ops.h, SparseAttentionParams): dims d, d + 1 of one head's
// output rounded to bf16, then, for the last rope_dim dims where the call asks for it, the inverse RoPE of
// the rounded pair (rope.cu's pair step): the bits of sparse_attention then rope(inverse).
#pragma once
#include <cuda_bf16.h>

#include <cstdint>

#include "backend/cuda/cpu_math.cuh"
#include "backend/cuda/ops.h"

namespace dsv4::cuda {

__device__ __forceinline__ __nv_bfloat162 attention_out_pair(const SparseAttentionParams& p, int64_t token, int d,
                                                             float o0, float o1) {
  __nv_bfloat162 v = __floats2bfloat162_rn(o0, o1);
  const int first = p.dim - p.rope_dim;
  if (p.rope_inv_freq && d >= first) {
    const float2 f = __bfloat1622float2(v);
    const float2 r = cpu_rope_pair(f.x, f.y, float(p.rope_positions[token]), p.rope_inv_freq[(d - first) / 2], true);
    v = __floats2bfloat162_rn(r.x, r.y);
  }
  return v;
}

}  // namespace dsv4::cuda
