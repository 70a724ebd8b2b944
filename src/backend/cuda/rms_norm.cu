// RMSNorm kernel (contract in ops.h).
#include <algorithm>
#include <cstdint>

#include "backend/cuda/act_quant.cuh"
#include "backend/cuda/check.h"
#include "backend/cuda/cpu_math.cuh"
#include "backend/cuda/kernel_util.cuh"
#include "backend/cuda/ops.h"
#include "backend/cuda/quant_sim.cuh"

namespace dsv4::cuda {
namespace {

constexpr int kMaxThreads = 256;

// The KV finish of vector v (elements 8v .. 8v + 7) of a normed row, called by every lane of the warp:
// rope dims (from dim - rope_dim) rotated in pairs as rope_kernel does, the other dims snapped to FP8 in
// 64-blocks (8 consecutive lanes) as kv_snap_kernel does, each step on the bf16 values of the one before.
__device__ __forceinline__ uint4 kv_finish(const RmsNormParams& p, int64_t row, int v, bool active, uint4 y) {
  float f[8];
  bf16x8_values(y, f);
  const int nope = p.dim - p.rope_dim;
  const bool rope = 8 * v >= nope;  // past the row (idle lanes): neither step
  float amax = 0.0f;
#pragma unroll
  for (int i = 0; i < 8; ++i) amax = fmaxf(amax, fabsf(f[i]));
#pragma unroll
  for (int o = 4; o > 0; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));  // the 64-block
  const float s = qsim::pow2_scale(fmaxf(amax, kFp8AmaxFloor), kFp8MaxInv);
  __nv_bfloat162* o2 = reinterpret_cast<__nv_bfloat162*>(&y);
  if (!active) return y;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    if (rope) {
      const int pair = (8 * v + 2 * i - nope) / 2;
      const float2 r = cpu_rope_pair(f[2 * i], f[2 * i + 1], float(p.positions[row]), p.inv_freq[pair], false);
      o2[i] = __floats2bfloat162_rn(r.x, r.y);
    } else {
      o2[i] = __floats2bfloat162_rn(qsim::fp8_qdq(f[2 * i], s), qsim::fp8_qdq(f[2 * i + 1], s));
    }
  }
  return y;
}

// One block per row; each thread owns 8-element (16-byte) vectors v = tid, tid + blockDim, ...
// Two passes over the row: the second re-reads from L1/L2, which is cheaper than holding a row of
// unknown length in registers.
__global__ void rms_norm_kernel(RmsNormParams p) {
  allow_dependents();  // a fast_gemv after this kernel may start streaming its weights
  const int64_t row = blockIdx.x;
  const bf16* x = p.x + row * p.x_stride;
  bf16* y = p.y + row * p.y_stride;
  const int nvec = p.dim / 8;

  // Sum of squares in double, as cpu::rms_norm (bf16 squares are exact in double and the sum is
  // order-independent in practice), then r = 1 / sqrt(float(ss / dim) + eps) in fp32 (not rsqrtf).
  double ss = 0.0;
  for (int v = threadIdx.x; v < nvec; v += blockDim.x) {
    uint4 raw = reinterpret_cast<const uint4*>(x)[v];
    const __nv_bfloat162* h = reinterpret_cast<const __nv_bfloat162*>(&raw);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      float2 f = __bfloat1622float2(h[i]);
      ss += double(f.x) * f.x + double(f.y) * f.y;
    }
  }
  __shared__ double warp_part[kMaxThreads / 32];
  __shared__ float r_shared;
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);
  if ((threadIdx.x & 31) == 0) warp_part[threadIdx.x >> 5] = ss;
  __syncthreads();
  if (threadIdx.x == 0) {
    double t = 0.0;
    for (int w = 0; w < int(blockDim.x >> 5); ++w) t += warp_part[w];
    r_shared = 1.0f / sqrtf(__fadd_rn(float(t / double(p.dim)), p.eps));
  }
  __syncthreads();
  const float r = r_shared;

  // Every thread runs every round (the quantization's shuffles): vector v = base + tid, idle past nvec.
  // With codes, a 128-element block is 16 consecutive vectors: a half-warp of one round.
  for (int base = 0; base < nvec; base += int(blockDim.x)) {
    const int v = base + int(threadIdx.x);
    const bool active = v < nvec;
    uint4 out = make_uint4(0u, 0u, 0u, 0u);
    if (active) {
      uint4 raw = reinterpret_cast<const uint4*>(x)[v];
      const __nv_bfloat162* h = reinterpret_cast<const __nv_bfloat162*>(&raw);
      __nv_bfloat162* o = reinterpret_cast<__nv_bfloat162*>(&out);
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        float2 f = __bfloat1622float2(h[i]);
        float a = __fmul_rn(f.x, r), b = __fmul_rn(f.y, r);  // (x * r) * w, rounded like the twin
        if (p.weight) {
          a = __fmul_rn(a, p.weight[v * 8 + 2 * i]);
          b = __fmul_rn(b, p.weight[v * 8 + 2 * i + 1]);
        }
        o[i] = __floats2bfloat162_rn(a, b);
      }
    }
    if (p.rope_dim > 0) out = kv_finish(p, row, v, active, out);  // every lane: the snap's shuffles
    if (active) {
      reinterpret_cast<uint4*>(y)[v] = out;
      if (p.ring) {  // the decode step's ring row (the KV finish's rows)
        const int64_t slot_row = int64_t(p.slots[row]) * p.window + p.positions[row] % p.window;
        reinterpret_cast<uint4*>(p.ring + slot_row * p.y_stride)[v] = out;
      }
    }
    if (!p.codes) continue;
    float q[8];
    bf16x8_values(out, q);
    float amax = 0.0f;
#pragma unroll
    for (int i = 0; i < 8; ++i) amax = fmaxf(amax, fabsf(q[i]));
#pragma unroll
    for (int o = 8; o > 0; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));  // the half-warp
    const float s = fp8_block_scale(amax);
    if (!active) continue;
    uint32_t lo = 0, hi = 0;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      lo |= fp8_code(q[i], s) << (8 * i);
      hi |= fp8_code(q[4 + i], s) << (8 * i);
    }
    *reinterpret_cast<uint2*>(p.codes + row * p.codes_stride + int64_t(v) * 8) = make_uint2(lo, hi);
    if ((threadIdx.x & 15) == 0) p.scales[row * p.sf_row_stride + int64_t(v / 16) * p.sf_block_stride] = s;
  }
}


}  // namespace

void rms_norm(const DeviceContext& ctx, const RmsNormParams& p) {
  if (p.rows == 0) return;
  if (!p.x || !p.y) fail("rms_norm: null input or output");
  if (p.dim <= 0 || p.dim % 8 != 0) fail("rms_norm: dim ", p.dim, " must be a positive multiple of 8");
  if (p.x_stride % 8 != 0 || p.y_stride % 8 != 0 || !aligned16(p.x) || !aligned16(p.y))
    fail("rms_norm: rows must start on 16-byte boundaries (strides ", p.x_stride, ", ", p.y_stride, ")");
  if (p.codes && (!p.scales || p.dim % 128 != 0 || p.codes_stride % 8 != 0 ||
                  (reinterpret_cast<uintptr_t>(p.codes) & 7u) != 0))
    fail("rms_norm: the fused quantization needs scales, dim % 128 == 0 (dim ", p.dim,
         ") and 8-byte aligned code rows");
  if (p.rope_dim > 0 && (!p.positions || !p.inv_freq || p.rope_dim % 8 != 0 || p.rope_dim > p.dim ||
                         (p.dim - p.rope_dim) % 64 != 0))
    fail("rms_norm: the KV finish needs positions, inv_freq, rope_dim % 8 == 0 and (dim - rope_dim) % 64 == 0 "
         "(dim ", p.dim, ", rope_dim ", p.rope_dim, ")");
  if (p.ring && (p.rope_dim <= 0 || !p.slots || p.window <= 0 || !aligned16(p.ring)))
    fail("rms_norm: the ring copy goes with the KV finish and needs slots, a positive window and a 16-byte aligned ring");
  const int grid = narrow_int(p.rows, "rms_norm rows");
  int threads = int(std::min<int64_t>(kMaxThreads, ceil_div(p.dim / 8, 32) * 32));
  rms_norm_kernel<<<grid, threads, 0, ctx.stream()>>>(p);
  DSV4_CUDA_CHECK_LAUNCH();
}

}  // namespace dsv4::cuda
