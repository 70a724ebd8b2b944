// Sparse decode attention with sinks (contract in ops.h; MODEL.md §4.4).
//
// One block per (token, group of G heads), three phases over the token's key list:
//   1. logits: one thread per key, its row read once for the G heads (q in shared memory), the dot in
//      ascending dims as the twin sums it (bf16 products are exact in fp32: bit-identical logits);
//   2. per head: M = max z, p_s = exp(z_s - M) in double rounded once (glibc's expf), the denominator
//      summed in the twin's order (sink term first, then the keys in list order);
//   3. P.V: each thread owns two output dims and walks all keys with bf16(p_s).
// Rows of the page pool are read from their compact records in place (kv_record.cuh: the same bf16
// values). The exact max is known before any p is formed, so bf16(p) is rounded exactly where the reference
// rounds it (an online softmax would round rescaled values instead). This is the correctness-first
// decode kernel of the exact tier: it re-reads the key rows once per head group from L2; the fast tier
// takes the split-K kernel (attention_split.cu) for calls of few tokens.
#include <cstdint>

#include "backend/cuda/attention_out.cuh"
#include "backend/cuda/check.h"
#include "backend/cuda/cpu_math.cuh"
#include "backend/cuda/kernel_util.cuh"
#include "backend/cuda/kv_record.cuh"
#include "backend/cuda/linear_exact.h"
#include "backend/cuda/ops.h"

namespace dsv4::cuda {
namespace {

constexpr int kThreads = 256;

template <int DIM, int G>
__global__ void __launch_bounds__(kThreads) sparse_attention_kernel(SparseAttentionParams p) {
  extern __shared__ float smem[];
  float* z = smem;                                                  // [G][max_keys]
  int32_t* idx = reinterpret_cast<int32_t*>(smem + G * p.max_keys); // [max_keys]
  __shared__ float den_s[G], max_s[G];

  const int groups = p.heads / G;
  const int64_t token = blockIdx.x / groups;
  const int h0 = (blockIdx.x % groups) * G;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const rec::KvRows<DIM> rows{p.kv, p.records, p.record_base, p.rec};

  // q of the G heads in shared memory as fp32 (exact bf16 values).
  float* qs = reinterpret_cast<float*>(idx + p.max_keys);  // [G][DIM]
  for (int i = threadIdx.x; i < G * DIM; i += kThreads)
    qs[i] = __bfloat162float(p.q[(token * p.heads + h0 + i / DIM) * DIM + i % DIM]);
  __syncthreads();

  // Phase 1: logits, one thread per key, the dot in ascending dims (the twin's order; products of
  // bf16 values are exact in fp32).
  const int32_t* ind = p.indices + token * p.max_keys;
  for (int s = threadIdx.x; s < p.max_keys; s += kThreads) {
    const int32_t e = ind[s];
    idx[s] = e;
    if (e < 0) {
#pragma unroll
      for (int g = 0; g < G; ++g) z[g * p.max_keys + s] = -INFINITY;
      continue;
    }
    float acc[G];
#pragma unroll
    for (int g = 0; g < G; ++g) acc[g] = 0.0f;
    for (int c = 0; c < DIM; c += 8) {
      uint4 raw = rows.load8(e, c);
      const __nv_bfloat162* h = reinterpret_cast<const __nv_bfloat162*>(&raw);
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const float2 f = __bfloat1622float2(h[i]);
#pragma unroll
        for (int g = 0; g < G; ++g) {
          acc[g] = __fadd_rn(acc[g], __fmul_rn(qs[g * DIM + c + 2 * i], f.x));
          acc[g] = __fadd_rn(acc[g], __fmul_rn(qs[g * DIM + c + 2 * i + 1], f.y));
        }
      }
    }
#pragma unroll
    for (int g = 0; g < G; ++g) z[g * p.max_keys + s] = __fmul_rn(acc[g], p.scale);
  }
  __syncthreads();

  // Phase 2: one warp per head of the group.
  if (warp < G) {
    float* zg = z + warp * p.max_keys;
    float m = -INFINITY;
    for (int s = lane; s < p.max_keys; s += 32) m = fmaxf(m, zg[s]);
    m = warp_max(m);
    if (m != -INFINITY)
      for (int s = lane; s < p.max_keys; s += 32) zg[s] = exp_f32(__fsub_rn(zg[s], m));  // exp(-inf) = 0
    __syncwarp();
    if (lane == 0) {  // the twin's denominator: the sink's term first, then the keys in list order
      float den = 0.0f;
      if (m != -INFINITY) {
        den = exp_f32(__fsub_rn(p.sinks[h0 + warp], m));
        for (int s = 0; s < p.max_keys; ++s) den = __fadd_rn(den, zg[s]);
      }
      max_s[warp] = m;
      den_s[warp] = den;
    }
  }
  __syncthreads();

  // Phase 3: P.V over the same rows, two dims per thread.
  const int d = threadIdx.x * 2;
  if (d >= DIM) return;
  float acc[G][2];
#pragma unroll
  for (int g = 0; g < G; ++g) acc[g][0] = acc[g][1] = 0.0f;
#pragma unroll 4
  for (int s = 0; s < p.max_keys; ++s) {
    const int32_t e = idx[s];
    if (e < 0) continue;
    const float2 kv = rows.load2(e, d);
#pragma unroll
    for (int g = 0; g < G; ++g) {
      const float pr = __bfloat162float(__float2bfloat16_rn(z[g * p.max_keys + s]));  // bf16(p) for P.V
      acc[g][0] = __fadd_rn(acc[g][0], __fmul_rn(pr, kv.x));
      acc[g][1] = __fadd_rn(acc[g][1], __fmul_rn(pr, kv.y));
    }
  }
#pragma unroll
  for (int g = 0; g < G; ++g) {
    float o0 = 0.0f, o1 = 0.0f;
    if (max_s[g] != -INFINITY) {
      o0 = __fdiv_rn(acc[g][0], den_s[g]);
      o1 = __fdiv_rn(acc[g][1], den_s[g]);
    }
    *reinterpret_cast<__nv_bfloat162*>(p.out + (token * p.heads + h0 + g) * DIM + d) =
        attention_out_pair(p, token, d, o0, o1);
  }
}

template <int DIM, int G>
void launch(const DeviceContext& ctx, const SparseAttentionParams& p) {
  const size_t smem = size_t(G + 1) * size_t(p.max_keys) * sizeof(float) + size_t(G) * DIM * sizeof(float);
  auto kernel = sparse_attention_kernel<DIM, G>;
  if (smem > 48 * 1024) allow_max_dynamic_smem(ctx, kernel);
  const int grid = narrow_int(p.tokens * (p.heads / G), "sparse_attention grid");
  kernel<<<grid, kThreads, smem, ctx.stream()>>>(p);
  DSV4_CUDA_CHECK_LAUNCH();
}

template <int DIM>
void dispatch_group(const DeviceContext& ctx, const SparseAttentionParams& p) {
  // Four heads per block share each key read; fall back to fewer when the logits would not fit in
  // shared memory or when too few blocks would be launched to cover the GPU.
  auto fits = [&](int g) { return (size_t(g + 1) * size_t(p.max_keys) + size_t(g) * DIM) * 4 <= ctx.max_smem_per_block(); };
  const bool many = p.tokens * p.heads / 4 >= 2 * ctx.sm_count();
  if (p.heads % 4 == 0 && fits(4) && many) return launch<DIM, 4>(ctx, p);
  if (p.heads % 2 == 0 && fits(2) && p.tokens * p.heads / 2 >= ctx.sm_count()) return launch<DIM, 2>(ctx, p);
  if (fits(1)) return launch<DIM, 1>(ctx, p);
  fail("sparse_attention: ", p.max_keys, " keys per query exceed the shared-memory logits buffer (",
       ctx.max_smem_per_block(), " bytes)");
}

}  // namespace

void check_attention_records(const SparseAttentionParams& p, const char* what) {
  if (!p.records) return;
  if (p.rec.nope + p.rec.rope != p.dim || p.rec.nope % kFp8KvBlock != 0 || p.rec.bytes <= 0 ||
      p.rec.bytes % kKvEntryAlign != 0 || p.record_base < 0 || reinterpret_cast<uintptr_t>(p.records) % kKvEntryAlign != 0)
    fail(what, ": records of ", p.rec.nope, " + ", p.rec.rope, " dims in ", p.rec.bytes, " bytes from row ",
         p.record_base, " do not fit rows of ", p.dim, " dims (8-byte aligned records of 64-dim FP8 blocks)");
}

void sparse_attention(const DeviceContext& ctx, const SparseAttentionParams& p) {
  if (p.tokens == 0) return;
  if (!p.q || !p.kv || !p.indices || !p.sinks || !p.out) fail("sparse_attention: null pointer");
  check_attention_records(p, "sparse_attention");
  if (p.heads <= 0 || p.max_keys <= 0) fail("sparse_attention: heads and max_keys must be positive");
  narrow_int(p.entries, "sparse_attention entries");
  if (p.rope_inv_freq && (!p.rope_positions || p.rope_dim <= 0 || p.rope_dim % 2 != 0 || p.rope_dim > p.dim))
    fail("sparse_attention: the inverse RoPE needs positions and an even rope_dim within dim ", p.dim, ", got ",
         p.rope_dim);
  // Prefill chunks above the exact-linear limit (the forward is not bit-exact there anyway) take the
  // tensor-core kernel, and so do the fast tier's calls above the split kernel's tokens (decode batches
  // of 17-512: H100 2026-12-06, batch 128 at context 0: the exact kernel 103 us); the exact tier's calls
  // up to the limit stay on the exact kernel below.
  const bool fast = ctx.kernels() == KernelTier::Fast;
  if ((p.tokens > kExactLinearMaxTokens || (fast && p.tokens > kSplitAttentionMaxTokens)) &&
      sparse_attention_mma_supported(ctx, p)) {
    SparseAttentionParams plain = p;
    plain.rope_inv_freq = nullptr;
    sparse_attention_mma(ctx, plain);
    if (p.rope_inv_freq)
      rope(ctx, {.x = p.out, .positions = p.rope_positions, .inv_freq = p.rope_inv_freq, .rows = p.tokens,
                 .heads = p.heads, .head_dim = p.dim, .rope_dim = p.rope_dim, .row_stride = int64_t(p.heads) * p.dim,
                 .head_stride = p.dim, .inverse = true});
    return;
  }
  // Decode and verify calls of the fast tier: the split-K kernel (the exact tier keeps the kernel below).
  if (fast && sparse_attention_split_supported(ctx, p)) return sparse_attention_split(ctx, p);
  switch (p.dim) {
    case 128: return dispatch_group<128>(ctx, p);
    case 256: return dispatch_group<256>(ctx, p);
    case 512: return dispatch_group<512>(ctx, p);
    default: fail("sparse_attention: head dim ", p.dim, " (supported: 128, 256, 512)");
  }
}

}  // namespace dsv4::cuda
