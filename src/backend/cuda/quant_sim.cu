// Official-numerics quantization sites of the attention (contracts in attn_ops.h): QuantSim::head_norm,
// QuantSim::kv (FP8 64-block snap) and QuantSim::indexer_key (Hadamard + FP4).
#include <cmath>

#include "backend/cuda/attn_ops.h"
#include "backend/cuda/check.h"
#include "backend/cuda/cpu_math.cuh"
#include "backend/cuda/kernel_util.cuh"
#include "backend/cuda/quant_sim.cuh"
#include "core/hadamard.h"

namespace dsv4::cuda {
namespace {

using qsim::bf16r;

// One warp per (row, head): the lanes load the head coalesced and square + round its values into
// shared memory in parallel; lane 0 then runs the twin's sequential sum out of shared memory (the
// dependent fadd chain is the only serial part) and the warp scales the head. kFree (the fast tier):
// lane L sums the squares of elements L, L + 32, ... in order and the warp adds the lanes' sums with
// warp_sum's xor tree, every lane then computing r (no serial chain, no squares in shared memory).
constexpr int kHeadNormWarps = 4;

template <bool kFree>
__global__ void __launch_bounds__(kHeadNormWarps * 32) head_norm_kernel(HeadNormParams p, int64_t total) {
  extern __shared__ float hn_smem[];  // per warp: sq [dim] fp32, then the values [dim] bf16
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int64_t idx = int64_t(blockIdx.x) * kHeadNormWarps + warp;
  if (idx >= total) return;  // whole warps only; no block barrier below
  float* sq = hn_smem + size_t(warp) * p.dim * 3 / 2;
  bf16* vs = reinterpret_cast<bf16*>(sq + p.dim);
  bf16* v = p.x + (idx / p.heads) * p.row_stride + (idx % p.heads) * p.dim;
  float part = 0.0f;
  for (int i = lane; i < p.dim; i += 32) {
    const bf16 b = v[i];
    const float f = __bfloat162float(b);
    vs[i] = b;
    const float f2 = bf16r(__fmul_rn(f, f));
    if constexpr (kFree) part = __fadd_rn(part, f2);
    else sq[i] = f2;
  }
  __syncwarp();
  auto inv_rms = [&](float sum) {
    const float mean = bf16r(__fdiv_rn(sum, float(p.dim)));
    return bf16r(__fdiv_rn(1.0f, __fsqrt_rn(bf16r(__fadd_rn(mean, p.eps)))));
  };
  float r = 0.0f;
  if constexpr (kFree) {
    r = inv_rms(warp_sum(part));
  } else {
    if (lane == 0) {
      float sum = 0.0f;
#pragma unroll 16
      for (int i = 0; i < p.dim; ++i) sum = __fadd_rn(sum, sq[i]);
      r = inv_rms(sum);
    }
    r = __shfl_sync(0xffffffffu, r, 0);
  }
  // Pairs (i, i + 1) per lane: normed, then (the optional RoPE) rotated from their bf16 values.
  const int nope = p.dim - p.rope_dim;
  for (int i = 2 * lane; i < p.dim; i += 64) {
    const float a = bf16r(__fmul_rn(__bfloat162float(vs[i]), r)), b = bf16r(__fmul_rn(__bfloat162float(vs[i + 1]), r));
    float2 o = make_float2(a, b);
    if (p.rope_dim > 0 && i >= nope)
      o = cpu_rope_pair(a, b, float(p.positions[idx / p.heads]), p.inv_freq[(i - nope) / 2], false);
    *reinterpret_cast<__nv_bfloat162*>(v + i) = __floats2bfloat162_rn(o.x, o.y);
  }
}

// One warp per (row, 64-block): two elements per lane.
__global__ void kv_snap_kernel(KvSnapParams p, int blocks, int64_t total_warps) {
  allow_dependents();  // a fast_gemv after this kernel may start streaming its weights
  const int64_t warp = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) >> 5;
  if (warp >= total_warps) return;
  const int lane = threadIdx.x & 31;
  bf16* x = p.x + (warp / blocks) * p.row_stride + int(warp % blocks) * kFp8KvBlock + 2 * lane;
  const float2 v = __bfloat1622float2(*reinterpret_cast<__nv_bfloat162*>(x));
  const float amax = fmaxf(warp_max(fmaxf(fabsf(v.x), fabsf(v.y))), kFp8AmaxFloor);
  const float s = qsim::pow2_scale(amax, kFp8MaxInv);
  *reinterpret_cast<__nv_bfloat162*>(x) = __floats2bfloat162_rn(qsim::fp8_qdq(v.x, s), qsim::fp8_qdq(v.y, s));
}

// One block of n/2 threads per vector (n <= 1024): Hadamard in shared memory, then one warp per
// 32-block computes the FP4 scale.
__global__ void hadamard_fp4_kernel(HadamardFp4Params p, float scale) {
  extern __shared__ float v[];
  bf16* x = p.x + int64_t(blockIdx.x) * p.stride;
  const int tid = threadIdx.x, threads = blockDim.x;
  for (int i = tid; i < p.n; i += threads) v[i] = __bfloat162float(x[i]);
  if (p.inv_freq) {  // the RoPE pairs of the last rope_dim dims, each rounded to bf16 as rope writes it
    __syncthreads();
    const int first = p.n - p.rope_dim;
    const float pos = float(p.positions[int64_t(blockIdx.x) / p.per_row]);
    for (int i = tid; i < p.rope_dim / 2; i += threads) {
      const int j = first + 2 * i;
      const float2 r = cpu_rope_pair(v[j], v[j + 1], pos, p.inv_freq[i], false);
      v[j] = __bfloat162float(__float2bfloat16_rn(r.x));
      v[j + 1] = __bfloat162float(__float2bfloat16_rn(r.y));
    }
  }
  qsim::hadamard_shared(v, p.n, scale, tid, threads);
  for (int i = tid; i < p.n; i += threads) {
    // every lane of a warp shares one 32-block when threads are laid out as i = block*32 + lane
    const float a = warp_max(fabsf(v[i]));
    const float s = qsim::pow2_scale(fmaxf(a, kFp4AmaxFloor), kFp4MaxInv);
    x[i] = __float2bfloat16_rn(qsim::fp4_qdq(v[i], s));
  }
}

}  // namespace

void head_norm_bf16(const DeviceContext& ctx, const HeadNormParams& p) {
  if (p.rows == 0) return;
  if (!p.x || p.heads <= 0 || p.dim <= 0) fail("head_norm_bf16: bad parameters");
  if (p.dim % 2 != 0 || p.dim > 4096 || p.row_stride % 2 != 0)
    fail("head_norm_bf16: dim ", p.dim, " must be even and at most 4096, the row stride even (pairs)");
  if (p.rope_dim > 0 && (!p.positions || !p.inv_freq || p.rope_dim % 2 != 0 || p.rope_dim > p.dim))
    fail("head_norm_bf16: RoPE needs positions, inv_freq and an even rope_dim <= dim (", p.rope_dim, ")");
  const int64_t total = p.rows * p.heads;
  const size_t smem = size_t(kHeadNormWarps) * p.dim * 6;  // fp32 squares + bf16 values per warp
  const bool free_order = ctx.kernels() == KernelTier::Fast;
  auto kernel = free_order ? head_norm_kernel<true> : head_norm_kernel<false>;
  if (smem > 48 * 1024) allow_max_dynamic_smem(ctx, kernel);
  kernel<<<narrow_int(ceil_div(total, kHeadNormWarps), "head_norm grid"), kHeadNormWarps * 32, smem, ctx.stream()>>>(
      p, total);
  DSV4_CUDA_CHECK_LAUNCH();
}

void fp8_kv_snap(const DeviceContext& ctx, const KvSnapParams& p) {
  if (p.rows == 0 || p.nope == 0) return;
  if (!p.x || p.nope % kFp8KvBlock != 0 || p.row_stride % 2 != 0)
    fail("fp8_kv_snap: nope ", p.nope, " must be a multiple of 64 and the row stride even");
  const int blocks = p.nope / kFp8KvBlock;
  const int64_t warps = p.rows * blocks;
  const int threads = 256;
  kv_snap_kernel<<<narrow_int(ceil_div(warps * 32, threads), "kv_snap grid"), threads, 0, ctx.stream()>>>(p, blocks,
                                                                                                        warps);
  DSV4_CUDA_CHECK_LAUNCH();
}

void hadamard_fp4(const DeviceContext& ctx, const HadamardFp4Params& p) {
  if (p.vectors == 0) return;
  if (!p.x || p.n < 32 || p.n > 1024 || (p.n & (p.n - 1)) != 0)
    fail("hadamard_fp4: n = ", p.n, " must be a power of two in [32, 1024]");
  if (p.inv_freq && (!p.positions || p.rope_dim <= 0 || p.rope_dim % 2 != 0 || p.rope_dim > p.n || p.per_row < 1))
    fail("hadamard_fp4: the RoPE needs positions, an even rope_dim within n (", p.rope_dim, ") and per_row >= 1");
  const int threads = p.n;  // i = tid: the warp of lane L holds elements 32w..32w+31 = one FP4 block
  hadamard_fp4_kernel<<<narrow_int(p.vectors, "hadamard_fp4 grid"), threads, size_t(p.n) * sizeof(float),
                        ctx.stream()>>>(p, hadamard_scale(p.n));
  DSV4_CUDA_CHECK_LAUNCH();
}

}  // namespace dsv4::cuda
