// Sparse attention with sinks on the tensor cores (contract in ops.h), for prefill calls above
// kExactLinearMaxTokens tokens; every smaller call takes the exact kernel in attention.cu.
//
// One block per (token, 64 heads), 8 warps: warp w owns heads 16 (w % 4) .. +15 and output dims
// 256 (w / 4) .. +255 (O: 16 x 256 fp32 = 128 registers per thread). The block first compacts the
// token's key list (valid indices in list order), then walks it in chunks of 32 keys whose rows are
// gathered into shared memory with cp.async (kStages-deep pipeline; rows of the page pool decoded from
// their compact records with plain loads and stores instead); q [64, 512] stays in shared memory.
// Per chunk, bf16 mma.sync.m16n8k16 with fp32 accumulation:
//   S = Q . K^T: each warp dots over its 256 dims, the two halves add their partial logits through
//     shared memory (a + b in both warps: identical logits), z = S * scale;
//   online softmax per head: running max m, p = expf(z - m) in fp32, the denominator l sums fp32 p,
//     O and l are rescaled by expf(m_old - m_new) when the max grows;
//   O += bf16(p) . V (K = V), P straight from the S accumulators (the m16n8 C fragment is the A
//     fragment of the next MMA).
// At the end den = l + expf(sink - m) (m is then the exact max) and o = bf16(O / den), one division.
// Numerics differ from the exact kernel (and the CPU twin) in three ways, all within Tol::Attention:
// the MMA's accumulation order for the logits, the denominator's summation order, and bf16(p) rounded
// relative to the running max of the chunks seen so far (rescaled afterwards in fp32) instead of the
// exact max. Tokens with no valid key get o = 0.
#include <cstdint>

#include "backend/cuda/async_copy.cuh"
#include "backend/cuda/check.h"
#include "backend/cuda/kernel_util.cuh"
#include "backend/cuda/kv_record.cuh"
#include "backend/cuda/mma.cuh"
#include "backend/cuda/ops.h"

namespace dsv4::cuda {
namespace {

constexpr int kHeads = 64;             // heads per block
constexpr int kDim = 512;              // head dim
constexpr int kHalf = kDim / 2;        // output dims per warp
constexpr int kKeys = 32;              // keys per chunk
constexpr int kStages = 3;             // cp.async pipeline depth
constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int kLd = kDim + 8;          // padded shared row (bf16): ldmatrix rows land in distinct banks
constexpr int kXld = kKeys + 8;        // padded row of the partial-logit exchange (fp32)

constexpr size_t kQBytes = size_t(kHeads) * kLd * 2;
constexpr size_t kKBytes = size_t(kStages) * kKeys * kLd * 2;
constexpr size_t kXBytes = size_t(2) * kHeads * kXld * 4;
constexpr size_t kCountBytes = 64;  // per-warp counts of the list compaction

// All shared memory is dynamic (no static __shared__), so the whole opt-in maximum is available.
size_t smem_bytes(int max_keys) { return kQBytes + kKBytes + kXBytes + kCountBytes + size_t(max_keys) * 4; }

__device__ __forceinline__ void ldsm_x4(uint32_t (&r)[4], const bf16* p) {
  const unsigned a = static_cast<unsigned>(__cvta_generic_to_shared(p));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(a));
}
__device__ __forceinline__ void ldsm_x4_trans(uint32_t (&r)[4], const bf16* p) {
  const unsigned a = static_cast<unsigned>(__cvta_generic_to_shared(p));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(a));
}
// Barrier of the two warps (64 threads) that share a head group; ids 1..4 (0 is __syncthreads).
__device__ __forceinline__ void pair_barrier(int id) { asm volatile("bar.sync %0, 64;\n" ::"r"(id) : "memory"); }
__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) {
  const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&v);
}

__global__ void __launch_bounds__(kThreads, 1) sparse_attention_mma_kernel(SparseAttentionParams p) {
  extern __shared__ __align__(16) unsigned char smem[];
  bf16* qs = reinterpret_cast<bf16*>(smem);                               // [kHeads][kLd]
  bf16* ks = reinterpret_cast<bf16*>(smem + kQBytes);                     // [kStages][kKeys][kLd]
  float* xs = reinterpret_cast<float*>(smem + kQBytes + kKBytes);         // [2][kHeads][kXld]
  int* warp_count = reinterpret_cast<int*>(smem + kQBytes + kKBytes + kXBytes);                 // [kWarps]
  int32_t* list = reinterpret_cast<int32_t*>(smem + kQBytes + kKBytes + kXBytes + kCountBytes);  // [max_keys]

  const int64_t token = blockIdx.x;
  const int h0 = blockIdx.y * kHeads;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int hg = warp & 3, half = warp >> 2;
  const int g = lane >> 2, q2 = (lane & 3) * 2;
  const rec::KvRows<kDim> rows{p.kv, p.records, p.record_base, p.rec};

  // Compact the key list: the valid indices in list order.
  const int32_t* ind = p.indices + token * p.max_keys;
  int n = 0;
  for (int s0 = 0; s0 < p.max_keys; s0 += kThreads) {
    const int s = s0 + tid;
    const int32_t e = s < p.max_keys ? ind[s] : -1;
    const unsigned ballot = __ballot_sync(0xffffffffu, e >= 0);
    if (lane == 0) warp_count[warp] = __popc(ballot);
    __syncthreads();
    int off = n, total = 0;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) {
      off += w < warp ? warp_count[w] : 0;
      total += warp_count[w];
    }
    if (e >= 0) list[off + __popc(ballot & ((1u << lane) - 1u))] = e;
    __syncthreads();
    n += total;
  }

  bf16* outp = p.out + (token * p.heads + h0) * kDim;
  if (n == 0) {  // no valid key: o = 0
    for (int i = tid; i < kHeads * kDim / 8; i += kThreads) reinterpret_cast<uint4*>(outp)[i] = make_uint4(0, 0, 0, 0);
    return;
  }
  const int chunks = (n + kKeys - 1) / kKeys;

  // q rows of the block's heads (group 0, with chunk 0).
  const bf16* qg = p.q + (token * p.heads + h0) * kDim;
  for (int i = tid; i < kHeads * kDim / 8; i += kThreads) {
    const int r = i / (kDim / 8), c = (i % (kDim / 8)) * 8;
    cp_async16(qs + r * kLd + c, qg + r * kDim + c, true);
  }
  auto load_chunk = [&](int c) {
    bf16* dst = ks + (c % kStages) * kKeys * kLd;
    for (int i = tid; i < kKeys * kDim / 8; i += kThreads) {
      const int r = i / (kDim / 8), v = (i % (kDim / 8)) * 8;
      const int key = c * kKeys + r;
      const bool valid = key < n;
      const int64_t e = valid ? list[key] : 0;
      if (valid && rows.record(e)) {  // a pool record: decoded in place, stored synchronously
        *reinterpret_cast<uint4*>(dst + r * kLd + v) = rows.load8(e, v);
        continue;
      }
      const bf16* src = valid ? p.kv + e * kDim + v : p.kv;
      cp_async16(dst + r * kLd + v, src, valid);  // rows past the list are zero (and masked below)
    }
  };
#pragma unroll
  for (int st = 0; st < kStages - 1; ++st) {
    if (st < chunks) load_chunk(st);
    cp_async_commit();
  }

  float o[kHalf / 8][4];
#pragma unroll
  for (int j = 0; j < kHalf / 8; ++j) o[j][0] = o[j][1] = o[j][2] = o[j][3] = 0.0f;
  float m_run[2] = {-INFINITY, -INFINITY}, l_run[2] = {0.0f, 0.0f};

  const bf16* qw = qs + (hg * 16) * kLd + half * kHalf;  // the warp's A tile origin
  float* x_mine = xs + (half * kHeads + hg * 16) * kXld;
  const float* x_other = xs + ((1 - half) * kHeads + hg * 16) * kXld;

  for (int c = 0; c < chunks; ++c) {
    cp_async_wait<kStages - 2>();
    __syncthreads();  // chunk c visible to all; every warp is done with chunk c - 1 (its buffer and xs)
    if (c + kStages - 1 < chunks) load_chunk(c + kStages - 1);
    cp_async_commit();
    const bf16* kb = ks + (c % kStages) * kKeys * kLd;

    // Partial logits over the warp's 256 dims: 16 heads x 32 keys.
    float s[4][4];
#pragma unroll
    for (int j = 0; j < 4; ++j) s[j][0] = s[j][1] = s[j][2] = s[j][3] = 0.0f;
#pragma unroll
    for (int kk = 0; kk < kHalf; kk += 16) {
      uint32_t a[4];
      ldsm_x4(a, qw + (lane & 15) * kLd + kk + (lane >> 4) * 8);
#pragma unroll
      for (int np = 0; np < 2; ++np) {
        const int m = lane >> 3;
        uint32_t b[4];
        ldsm_x4(b, kb + (np * 16 + (m >> 1) * 8 + (lane & 7)) * kLd + half * kHalf + kk + (m & 1) * 8);
        mma_bf16_16816(s[2 * np], a[0], a[1], a[2], a[3], b[0], b[1]);
        mma_bf16_16816(s[2 * np + 1], a[0], a[1], a[2], a[3], b[2], b[3]);
      }
    }
    // Exchange with the other half: z = (S_0 + S_1) * scale in both warps (fp32 addition commutes).
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      *reinterpret_cast<float2*>(x_mine + g * kXld + 8 * j + q2) = make_float2(s[j][0], s[j][1]);
      *reinterpret_cast<float2*>(x_mine + (g + 8) * kXld + 8 * j + q2) = make_float2(s[j][2], s[j][3]);
    }
    pair_barrier(1 + hg);
    float rmax[2] = {-INFINITY, -INFINITY};
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const float2 o0 = *reinterpret_cast<const float2*>(x_other + g * kXld + 8 * j + q2);
      const float2 o1 = *reinterpret_cast<const float2*>(x_other + (g + 8) * kXld + 8 * j + q2);
      const float other[4] = {o0.x, o0.y, o1.x, o1.y};
#pragma unroll
      for (int r = 0; r < 4; ++r) {
        const int key = c * kKeys + 8 * j + q2 + (r & 1);
        const float z = key < n ? __fmul_rn(__fadd_rn(s[j][r], other[r]), p.scale) : -INFINITY;
        s[j][r] = z;
        rmax[r >> 1] = fmaxf(rmax[r >> 1], z);
      }
    }
    // Online softmax: rows g (r = 0) and g + 8 (r = 1); the 4 lanes of a quad share a row.
    float alpha[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      float mx = rmax[r];
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
      const float m_new = fmaxf(m_run[r], mx);
      const float m_use = m_new == -INFINITY ? 0.0f : m_new;
      alpha[r] = m_run[r] == m_new ? 1.0f : expf(m_run[r] - m_use);
      m_run[r] = m_new;
      float sum = 0.0f;
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        s[j][2 * r] = expf(s[j][2 * r] - m_use);  // -inf -> 0
        s[j][2 * r + 1] = expf(s[j][2 * r + 1] - m_use);
        sum += s[j][2 * r] + s[j][2 * r + 1];
      }
      l_run[r] = l_run[r] * alpha[r] + sum;
    }
    if (__any_sync(0xffffffffu, alpha[0] != 1.0f || alpha[1] != 1.0f)) {
#pragma unroll
      for (int j = 0; j < kHalf / 8; ++j) {
        o[j][0] *= alpha[0];
        o[j][1] *= alpha[0];
        o[j][2] *= alpha[1];
        o[j][3] *= alpha[1];
      }
    }
    // O += bf16(P) . V over the warp's 256 dims.
#pragma unroll
    for (int kk = 0; kk < 2; ++kk) {
      const uint32_t a[4] = {pack_bf16(s[2 * kk][0], s[2 * kk][1]), pack_bf16(s[2 * kk][2], s[2 * kk][3]),
                             pack_bf16(s[2 * kk + 1][0], s[2 * kk + 1][1]),
                             pack_bf16(s[2 * kk + 1][2], s[2 * kk + 1][3])};
      const int m = lane >> 3;
      const bf16* vrow = kb + (kk * 16 + (m & 1) * 8 + (lane & 7)) * kLd + half * kHalf + (m >> 1) * 8;
#pragma unroll
      for (int np = 0; np < kHalf / 16; ++np) {
        uint32_t b[4];
        ldsm_x4_trans(b, vrow + np * 16);
        mma_bf16_16816(o[2 * np], a[0], a[1], a[2], a[3], b[0], b[1]);
        mma_bf16_16816(o[2 * np + 1], a[0], a[1], a[2], a[3], b[2], b[3]);
      }
    }
  }
  cp_async_wait<0>();

  // den = l + exp(sink - m), o = bf16(O / den).
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    float l = l_run[r];
    l += __shfl_xor_sync(0xffffffffu, l, 1);
    l += __shfl_xor_sync(0xffffffffu, l, 2);
    const int h = hg * 16 + g + 8 * r;
    const bool any = m_run[r] != -INFINITY;
    const float den = any ? l + expf(p.sinks[h0 + h] - m_run[r]) : 1.0f;
    bf16* orow = outp + int64_t(h) * kDim + half * kHalf + q2;
#pragma unroll
    for (int j = 0; j < kHalf / 8; ++j) {
      const float v0 = any ? __fdiv_rn(o[j][2 * r], den) : 0.0f;
      const float v1 = any ? __fdiv_rn(o[j][2 * r + 1], den) : 0.0f;
      *reinterpret_cast<__nv_bfloat162*>(orow + 8 * j) = __floats2bfloat162_rn(v0, v1);
    }
  }
}

}  // namespace

bool sparse_attention_mma_supported(const DeviceContext& ctx, const SparseAttentionParams& p) {
  return p.dim == kDim && p.heads > 0 && p.heads % kHeads == 0 && p.max_keys > 0 &&
         smem_bytes(p.max_keys) <= ctx.max_smem_per_block();
}

void sparse_attention_mma(const DeviceContext& ctx, const SparseAttentionParams& p) {
  if (p.tokens == 0) return;
  if (!p.q || !p.kv || !p.indices || !p.sinks || !p.out) fail("sparse_attention_mma: null pointer");
  check_attention_records(p, "sparse_attention_mma");
  if (!sparse_attention_mma_supported(ctx, p))
    fail("sparse_attention_mma: takes heads a multiple of 64 of dim 512 and a key list that fits shared memory; got ",
         p.heads, " x ", p.dim, ", ", p.max_keys, " keys");
  narrow_int(p.entries, "sparse_attention entries");
  const size_t smem = smem_bytes(p.max_keys);
  allow_max_dynamic_smem(ctx, sparse_attention_mma_kernel);
  const dim3 grid(narrow_int(p.tokens, "sparse_attention_mma tokens"), unsigned(p.heads / kHeads));
  sparse_attention_mma_kernel<<<grid, kThreads, smem, ctx.stream()>>>(p);
  DSV4_CUDA_CHECK_LAUNCH();
}

}  // namespace dsv4::cuda
