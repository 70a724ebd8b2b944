// RMSNorm kernel (contract in ops.h).
#include <algorithm>
#include <cstdint>

#include "backend/cuda/check.h"
#include "backend/cuda/kernel_util.cuh"
#include "backend/cuda/ops.h"

namespace dsv4::cuda {
namespace {

constexpr int kMaxThreads = 256;

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

  for (int v = threadIdx.x; v < nvec; v += blockDim.x) {
    uint4 raw = reinterpret_cast<const uint4*>(x)[v];
    const __nv_bfloat162* h = reinterpret_cast<const __nv_bfloat162*>(&raw);
    uint4 out;
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
    reinterpret_cast<uint4*>(y)[v] = out;
  }
}

bool aligned16(const void* ptr) { return (reinterpret_cast<uintptr_t>(ptr) & 15u) == 0; }

}  // namespace

void rms_norm(const DeviceContext& ctx, const RmsNormParams& p) {
  if (p.rows == 0) return;
  if (!p.x || !p.y) fail("rms_norm: null input or output");
  if (p.dim <= 0 || p.dim % 8 != 0) fail("rms_norm: dim ", p.dim, " must be a positive multiple of 8");
  if (p.x_stride % 8 != 0 || p.y_stride % 8 != 0 || !aligned16(p.x) || !aligned16(p.y))
    fail("rms_norm: rows must start on 16-byte boundaries (strides ", p.x_stride, ", ", p.y_stride, ")");
  const int grid = narrow_int(p.rows, "rms_norm rows");
  int threads = int(std::min<int64_t>(kMaxThreads, ceil_div(p.dim / 8, 32) * 32));
  rms_norm_kernel<<<grid, threads, 0, ctx.stream()>>>(p);
  DSV4_CUDA_CHECK_LAUNCH();
}

}  // namespace dsv4::cuda
