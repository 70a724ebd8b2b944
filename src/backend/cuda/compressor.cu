// Compressor kernels (contracts in attn_ops.h; CPU twin: compress_chunk in src/model/compressor.cpp).
// Pooling is independent per channel and per completed block: compressor_pool pools every block the
// run completes in parallel (one thread per (token, channel), reading the run's rows or the state), then
// updates the per-slot state; compressor_emit finishes each completed entry with one block per token.
#include <cmath>

#include "backend/cuda/attn_ops.h"
#include "backend/cuda/check.h"
#include "backend/cuda/cpu_math.cuh"
#include "backend/cuda/kernel_util.cuh"
#include "backend/cuda/kv_record.cuh"
#include "backend/cuda/quant_sim.cuh"
#include "core/hadamard.h"

namespace dsv4::cuda {
namespace {

constexpr int kPoolThreads = 128;

// Where the run's token values come from. A run is run_len tokens of one slot at consecutive positions
// pos0, pos0 + 1, ...; position q of the slot holds (a, g + ape[q % m]) of column col:
//  * q >= pos0: the token q - pos0 of the run (p.a, p.g);
//  * q < pos0 in the block of pos0 (a block the run continues): the current-block state cur_a / cur_g;
//  * q < pos0 in the block before it: the previous-block state prev_a / prev_g (A-halves, overlap only).
struct RunView {
  const CompressorPoolParams& p;
  int64_t t0, slot;
  int pos0, m, width;
  __device__ void value(int q, int col, float& a, float& g) const {
    if (q >= pos0) {
      const int64_t t = t0 + (q - pos0);
      a = p.a[t * width + col];
      g = __fadd_rn(p.g[t * width + col], p.ape[(q % m) * width + col]);
    } else if (q / m == pos0 / m) {
      const int64_t i = (slot * m + q % m) * width + col;
      a = p.cur_a[i];
      g = p.cur_g[i];
    } else {  // the previous block's A-half (col < dc)
      const int64_t i = (slot * m + q % m) * p.dc + col;
      a = p.prev_a[i];
      g = p.prev_g[i];
    }
  }
};

// Pooling: thread (token, channel); tokens that complete a block (pos % m == m - 1) pool it: softmax over
// the gates (CSA: the previous block's A-halves first, from block 1 on), in the twin's order. Every
// completed block of the run in parallel; the state is read only (compressor_state_kernel updates it).
__global__ void compressor_pool_kernel(CompressorPoolParams p, int ch_blocks) {
  const int64_t t = blockIdx.x / ch_blocks;
  const int ch = (blockIdx.x % ch_blocks) * kPoolThreads + threadIdx.x;
  if (ch >= p.dc) return;
  const int m = p.ratio, width = (p.overlap ? 2 : 1) * p.dc, off = p.overlap ? p.dc : 0;
  const int pos = p.positions[t];
  if (pos % m != m - 1) return;
  const int64_t t0 = t / p.run_len * p.run_len;
  const RunView v{p, t0, int64_t(p.slots[t0]), p.positions[t0], m, width};
  const int j0 = pos - (m - 1);  // first position of the block
  const bool prev = p.overlap && pos / m >= 1;
  float a, g, mx = -INFINITY;
  if (prev)
    for (int s = 0; s < m; ++s) {
      v.value(j0 - m + s, ch, a, g);
      mx = fmaxf(mx, g);
    }
  for (int s = 0; s < m; ++s) {
    v.value(j0 + s, off + ch, a, g);
    mx = fmaxf(mx, g);
  }
  float den = 0.0f, num = 0.0f;
  if (prev)
    for (int s = 0; s < m; ++s) {
      v.value(j0 - m + s, ch, a, g);
      const float e = exp_f32(__fsub_rn(g, mx));
      den = __fadd_rn(den, e);
      num = __fadd_rn(num, __fmul_rn(e, a));
    }
  for (int s = 0; s < m; ++s) {
    v.value(j0 + s, off + ch, a, g);
    const float e = exp_f32(__fsub_rn(g, mx));
    den = __fadd_rn(den, e);
    num = __fadd_rn(num, __fmul_rn(e, a));
  }
  p.pooled[t * p.dc + ch] = __float2bfloat16_rn(__fdiv_rn(num, den));
}

// State after the run, as the token-by-token walk leaves it: slot s of the current block holds the run's
// last token at a position = s (mod m); the previous block (overlap) holds the A-halves of the last block
// the run completed. Thread (run, s, col) owns element (s, col) of both.
__global__ void compressor_state_kernel(CompressorPoolParams p, int col_blocks) {
  const int m = p.ratio, width = (p.overlap ? 2 : 1) * p.dc;
  const int64_t rs = blockIdx.x / col_blocks;  // run * m + s
  const int col = (blockIdx.x % col_blocks) * kPoolThreads + threadIdx.x;
  if (col >= width) return;
  const int64_t run = rs / m;
  const int s = int(rs % m);
  const int64_t t0 = run * p.run_len;
  const int pos0 = p.positions[t0], last = pos0 + int(p.run_len) - 1;
  const int64_t slot = p.slots[t0];
  const RunView v{p, t0, slot, pos0, m, width};
  const int64_t i = (slot * m + s) * width + col;
  float a, g;
  if (p.overlap && col < p.dc) {
    const int jl = (last + 1) / m - 1;  // the last block that ends inside the run
    if (jl >= 0 && jl * m + m - 1 >= pos0) {
      v.value(jl * m + s, col, a, g);  // reads cur_a / cur_g[i] before this thread overwrites them
      p.prev_a[(slot * m + s) * p.dc + col] = a;
      p.prev_g[(slot * m + s) * p.dc + col] = g;
    }
  }
  const int q = last - ((last - s) % m + m) % m;  // the last position <= last with q = s (mod m)
  if (q >= pos0) {
    v.value(q, col, a, g);
    p.cur_a[i] = a;
    p.cur_g[i] = g;
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
  const int64_t row = p.entry_rows.row(int64_t(p.slots[t]), j);
  if (row < 0) return;  // no page (positions must stay below max_ctx; the backend takes pages first)
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
  // The finished row (bf16 values) as its record, packed by warp 0.
  __syncthreads();  // every thread is done reading v
  v[i] = qsim::bf16r(out);
  __syncthreads();
  if (warp != 0) return;
  const float* row_v = v;
  auto value = [row_v](int k) { return row_v[k]; };
  if (p.indexer)
    rec::pack_indexer_row(value, p.records + row * p.key_rec.bytes, p.key_rec, lane);
  else
    rec::pack_kv_row(value, p.records + row * p.kv_rec.bytes, p.kv_rec, lane);
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
  compressor_pool_kernel<<<narrow_int(p.tokens * ch_blocks, "compressor_pool grid"), kPoolThreads, 0, ctx.stream()>>>(
      p, ch_blocks);
  DSV4_CUDA_CHECK_LAUNCH();
  const int col_blocks = int(ceil_div(int64_t(p.overlap ? 2 : 1) * p.dc, kPoolThreads));
  compressor_state_kernel<<<narrow_int(p.tokens / p.run_len * p.ratio * col_blocks, "compressor_state grid"),
                            kPoolThreads, 0, ctx.stream()>>>(p, col_blocks);
  DSV4_CUDA_CHECK_LAUNCH();
}

void compressor_emit(const DeviceContext& ctx, const CompressorEmitParams& p) {
  if (p.tokens == 0) return;
  if (!p.pooled || !p.norm || !p.inv_freq || !p.records || !p.positions || !p.slots || !p.entry_rows.pages)
    fail("compressor_emit: null pointer");
  if (reinterpret_cast<uintptr_t>(p.records) % kKvEntryAlign != 0) fail("compressor_emit: records must be 8-byte aligned");
  if (p.entry_rows.per_page <= 0) fail("compressor_emit: ", p.entry_rows.per_page, " entries per page");
  if (p.dc < 64 || p.dc > 1024 || p.dc % 64 != 0 || p.rope_dim % 2 != 0 || p.rope_dim > p.dc)
    fail("compressor_emit: dc ", p.dc, " must be a multiple of 64 up to 1024, rope_dim ", p.rope_dim);
  if (!p.indexer && (p.dc - p.rope_dim) % kFp8KvBlock != 0)
    fail("compressor_emit: ", p.dc - p.rope_dim, " non-rope dims are not a multiple of 64");
  if (p.indexer && (p.dc & (p.dc - 1)) != 0) fail("compressor_emit: indexer dc ", p.dc, " must be a power of two");
  if (p.indexer ? p.key_rec.dim != p.dc || p.key_rec.bytes <= 0 || p.key_rec.bytes % kIndexerKeyAlign != 0
                : p.kv_rec.nope + p.kv_rec.rope != p.dc || p.kv_rec.rope != p.rope_dim || p.kv_rec.bytes <= 0 ||
                      p.kv_rec.bytes % kKvEntryAlign != 0)
    fail("compressor_emit: the record geometry does not match dc ", p.dc, " and rope_dim ", p.rope_dim);
  compressor_emit_kernel<<<narrow_int(p.tokens, "compressor_emit grid"), p.dc, size_t(p.dc) * sizeof(float),
                           ctx.stream()>>>(p, p.indexer ? hadamard_scale(p.dc) : 1.0f);
  DSV4_CUDA_CHECK_LAUNCH();
}

}  // namespace dsv4::cuda
