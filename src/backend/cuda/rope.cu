// Interleaved RoPE kernel (contract in ops.h).
#include "backend/cuda/check.h"
#include "backend/cuda/cpu_math.cuh"
#include "backend/cuda/kernel_util.cuh"
#include "backend/cuda/ops.h"

namespace dsv4::cuda {
namespace {

// One thread per (row, head, pair): cpu_rope_pair (cpu_math.cuh) on the pair.
__global__ void rope_kernel(RopeParams p, int half, int total) {
  const int idx = blockIdx.x * blockDim.x + threadIdx.x;
  if (idx >= total) return;
  const int i = idx % half;
  const int head = (idx / half) % p.heads;
  const int64_t row = idx / (half * p.heads);
  bf16* x = p.x + row * p.row_stride + int64_t(head) * p.head_stride + (p.head_dim - p.rope_dim) + 2 * i;
  const float2 v = __bfloat1622float2(*reinterpret_cast<__nv_bfloat162*>(x));
  const float2 r = cpu_rope_pair(v.x, v.y, float(p.positions[row]), p.inv_freq[i], p.inverse);
  *reinterpret_cast<__nv_bfloat162*>(x) = __floats2bfloat162_rn(r.x, r.y);
}

}  // namespace

void rope(const DeviceContext& ctx, const RopeParams& p) {
  if (p.rows == 0) return;
  if (!p.x || !p.positions || !p.inv_freq) fail("rope: null pointer");
  if (p.rope_dim <= 0 || p.rope_dim % 2 != 0 || p.rope_dim > p.head_dim)
    fail("rope: rope_dim ", p.rope_dim, " must be even and within head_dim ", p.head_dim);
  if ((p.head_dim - p.rope_dim) % 2 != 0 || p.row_stride % 2 != 0 || p.head_stride % 2 != 0)
    fail("rope: pairs must be 4-byte aligned (even offsets and strides)");
  const int half = p.rope_dim / 2;
  const int total = narrow_int(p.rows * p.heads * half, "rope pairs");
  const int threads = 256;
  rope_kernel<<<int(ceil_div(total, threads)), threads, 0, ctx.stream()>>>(p, half, total);
  DSV4_CUDA_CHECK_LAUNCH();
}

}  // namespace dsv4::cuda
