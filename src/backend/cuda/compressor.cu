// Compressor kernels (contracts in attn_ops.h; CPU twin: compress_chunk in src/model/compressor.cpp).
// Pooling is independent per channel, so compressor_pool gives each thread one channel of one run and
// walks the run's tokens in order (the block slots and the CSA previous block are per-channel state);
// compressor_emit then finishes each completed entry with one block per token.
#include <cmath>

#include "backend/cuda/attn_ops.h"
#include "backend/cuda/check.h"
#include "backend/cuda/cpu_math.cuh"
#include "backend/cuda/kernel_util.cuh"
#include "backend/cuda/quant_sim.cuh"
#include "core/hadamard.h"

namespace dsv4::cuda {
namespace {

constexpr int kPoolThreads = 128;

__global__ void compressor_pool_kernel(CompressorPoolParams p, int ch_blocks) {
  const int64_t run = blockIdx.x / ch_blocks;
  const int ch = (blockIdx.x % ch_blocks) * kPoolThreads + threadIdx.x;
  if (ch >= p.dc) return;
  const int m = p.ratio, c = p.overlap ? 2 : 1, width = c * p.dc, off = p.overlap ? p.dc : 0;
  for (int64_t i = 0; i < p.run_len; ++i) {
    const int64_t t = run * p.run_len + i;
    const int pos = p.positions[t];
    const int64_t slot = p.slots[t];
    const int sl = pos % m;
    float* ca = p.cur_a + slot * m * width;
    float* cg = p.cur_g + slot * m * width;
    for (int h = 0; h < c; ++h) {
      const int col = h * p.dc + ch;
      ca[sl * width + col] = p.a[t * width + col];
      cg[sl * width + col] = __fadd_rn(p.g[t * width + col], p.ape[sl * width + col]);
    }
    if (sl != m - 1) continue;
    // Softmax over the gates (previous block's A-halves first), in the twin's order.
    const bool prev = p.overlap && pos / m >= 1;
    float* pa = p.overlap ? p.prev_a + slot * m * p.dc : nullptr;
    float* pg = p.overlap ? p.prev_g + slot * m * p.dc : nullptr;
    float mx = -INFINITY;
    if (prev)
      for (int s = 0; s < m; ++s) mx = fmaxf(mx, pg[s * p.dc + ch]);
    for (int s = 0; s < m; ++s) mx = fmaxf(mx, cg[s * width + off + ch]);
    float den = 0.0f, num = 0.0f;
    if (prev)
      for (int s = 0; s < m; ++s) {
        const float e = cpu_expf(__fsub_rn(pg[s * p.dc + ch], mx));
        den = __fadd_rn(den, e);
        num = __fadd_rn(num, __fmul_rn(e, pa[s * p.dc + ch]));
      }
    for (int s = 0; s < m; ++s) {
      const float e = cpu_expf(__fsub_rn(cg[s * width + off + ch], mx));
      den = __fadd_rn(den, e);
      num = __fadd_rn(num, __fmul_rn(e, ca[s * width + off + ch]));
    }
    p.pooled[t * p.dc + ch] = __float2bfloat16_rn(__fdiv_rn(num, den));
    if (p.overlap)
      for (int s = 0; s < m; ++s) {
        pa[s * p.dc + ch] = ca[s * width + ch];
        pg[s * p.dc + ch] = cg[s * width + ch];
      }
  }
}

// One block of dc threads per token; thread i owns element i.
__global__ void compressor_emit_kernel(CompressorEmitParams p, float hscale) {
  extern __shared__ float v[];  // [dc]
  __shared__ double warp_ss[32];
  __shared__ float r_shared;
  const int64_t t = blockIdx.x;
  const int pos = p.positions[t];
  if (pos % p.ratio != p.ratio - 1) return;
  const int64_t j = pos / p.ratio;
  if (j >= p.max_entries) return;  // beyond the state's capacity (positions must stay below max_ctx)
  const int i = threadIdx.x, lane = i & 31, warp = i >> 5, nwarps = blockDim.x >> 5;
  const float x = __bfloat162float(p.pooled[t * p.dc + i]);
  // RMSNorm as rms_norm.cu: fp32 sum of squares, 1/sqrt, (x * r) * w, one rounding.
  // The sum of squares in double, as cpu::rms_norm.
  double ss = double(x) * x;
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);
  if (lane == 0) warp_ss[warp] = ss;
  __syncthreads();
  if (i == 0) {
    double tot = 0.0;
    for (int w = 0; w < nwarps; ++w) tot += warp_ss[w];
    r_shared = 1.0f / sqrtf(__fadd_rn(float(tot / double(p.dc)), p.eps));
  }
  __syncthreads();
  v[i] = qsim::bf16r(__fmul_rn(__fmul_rn(x, r_shared), p.norm[i]));
  __syncthreads();
  // RoPE at the block's first position on the trailing rope dims (rope.cu's arithmetic).
  const int nope = p.dc - p.rope_dim;
  if (i >= nope && (i - nope) % 2 == 0) {
    const int pair = (i - nope) / 2;
    const float ang = float(j * p.ratio) * p.inv_freq[pair];
    float s, c;
    cpu_sincosf(ang, &s, &c);
    const float a = v[i], b = v[i + 1];
    v[i] = qsim::bf16r(__fsub_rn(__fmul_rn(a, c), __fmul_rn(b, s)));
    v[i + 1] = qsim::bf16r(__fadd_rn(__fmul_rn(a, s), __fmul_rn(b, c)));
  }
  __syncthreads();
  float out;
  if (p.indexer) {
    qsim::hadamard_shared(v, p.dc, hscale, i, blockDim.x);
    const float s = qsim::pow2_scale(fmaxf(warp_max(fabsf(v[i])), kFp4AmaxFloor), kFp4MaxInv);
    out = qsim::fp4_qdq(v[i], s);
  } else if (i < nope) {
    const int b0 = i / kFp8KvBlock * kFp8KvBlock;
    float amax = 0.0f;
    for (int k = 0; k < kFp8KvBlock; ++k) amax = fmaxf(amax, fabsf(v[b0 + k]));
    out = qsim::fp8_qdq(v[i], qsim::pow2_scale(fmaxf(amax, kFp8AmaxFloor), kFp8MaxInv));
  } else {
    out = v[i];
  }
  p.entries[(int64_t(p.slots[t]) * p.max_entries + j) * p.dc + i] = __float2bfloat16_rn(out);
}

}  // namespace

void compressor_pool(const DeviceContext& ctx, const CompressorPoolParams& p) {
  if (p.tokens == 0) return;
  if (!p.a || !p.g || !p.ape || !p.cur_a || !p.cur_g || !p.pooled || !p.positions || !p.slots)
    fail("compressor_pool: null pointer");
  if (p.overlap && (!p.prev_a || !p.prev_g)) fail("compressor_pool: overlap needs the previous-block state");
  if (p.ratio <= 0 || p.dc <= 0 || p.run_len <= 0 || p.tokens % p.run_len != 0)
    fail("compressor_pool: ratio ", p.ratio, ", dc ", p.dc, ", ", p.tokens, " tokens in runs of ", p.run_len);
  const int ch_blocks = int(ceil_div(p.dc, kPoolThreads));
  const int grid = narrow_int(p.tokens / p.run_len * ch_blocks, "compressor_pool grid");
  compressor_pool_kernel<<<grid, kPoolThreads, 0, ctx.stream()>>>(p, ch_blocks);
  DSV4_CUDA_CHECK_LAUNCH();
}

void compressor_emit(const DeviceContext& ctx, const CompressorEmitParams& p) {
  if (p.tokens == 0) return;
  if (!p.pooled || !p.norm || !p.inv_freq || !p.entries || !p.positions || !p.slots)
    fail("compressor_emit: null pointer");
  if (p.dc < 64 || p.dc > 1024 || p.dc % 64 != 0 || p.rope_dim % 2 != 0 || p.rope_dim > p.dc)
    fail("compressor_emit: dc ", p.dc, " must be a multiple of 64 up to 1024, rope_dim ", p.rope_dim);
  if (!p.indexer && (p.dc - p.rope_dim) % kFp8KvBlock != 0)
    fail("compressor_emit: ", p.dc - p.rope_dim, " non-rope dims are not a multiple of 64");
  if (p.indexer && (p.dc & (p.dc - 1)) != 0) fail("compressor_emit: indexer dc ", p.dc, " must be a power of two");
  compressor_emit_kernel<<<narrow_int(p.tokens, "compressor_emit grid"), p.dc, size_t(p.dc) * sizeof(float),
                           ctx.stream()>>>(p, p.indexer ? hadamard_scale(p.dc) : 1.0f);
  DSV4_CUDA_CHECK_LAUNCH();
}

}  // namespace dsv4::cuda
