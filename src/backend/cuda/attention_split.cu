// Split-K sparse decode attention with sinks: the fast tier's kernel for calls of few tokens (contract in
// ops.h; MODEL.md §4.4).
//
// The exact kernel (attention.cu) runs one block per (token, head group) and walks the token's whole key
// list in it: at batch 1 that is 64 blocks on 132 SMs, ~0.13 µs per key (an HCA layer at 128K context,
// 1,152 keys: 150 µs; at 1M, 8,320 keys: ~1.1 ms; docs/perf-log.md). Here the key list is cut into
// `splits` chunks of `chunk` keys (both from max_keys alone, so a query's result does not depend on the
// other queries of the call: a decode step and a verify call give the same row), one block per
// (token, group of G heads, chunk), so a key row is read and decoded once for G heads (4, or 1 where
// that would leave too few blocks):
//   partial: logits with a warp per key (8 dims per lane and load, fp32 dots, warp sums), the chunk's max
//            m_j, p = exp(z - m_j), l_j = sum p, o_j = sum bf16(p) v (the reference's bf16 P, rounded
//            against the chunk's max as the tensor-core kernel rounds against its running max);
//   combine: M = max m_j, den = exp(sink - M) + sum_j exp(m_j - M) l_j, out = sum_j exp(m_j - M) o_j / den.
// Pool rows are read from their compact records in place (kv_record.cuh). A token with no key gives zeros, as the exact kernel does. Partials live in the context's workspace
// ([tokens * heads][splits][dim + 2] floats), written and read within this op on the context's stream. With
// tickets (SparseAttentionParams) the combine runs in the partial launch: the last split block of each
// (token, head group) to finish (an atomic ticket after a fence) combines its rows and zeroes the ticket.
#include <cstdint>

#include "backend/cuda/attention_out.cuh"
#include "backend/cuda/check.h"
#include "backend/cuda/kernel_util.cuh"
#include "backend/cuda/kv_record.cuh"
#include "backend/cuda/ops.h"

namespace dsv4::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int kKeysPerSplit = 128;  // target chunk: enough blocks at batch 1 for the long lists
constexpr int kMaxSplits = 16;

struct SplitGeom {
  int splits = 1, chunk = 0;
};

SplitGeom split_geom(int max_keys) {
  SplitGeom g;
  g.splits = int(std::min<int64_t>(kMaxSplits, ceil_div(max_keys, kKeysPerSplit)));
  g.chunk = int(ceil_div(max_keys, g.splits));
  return g;
}

size_t partial_bytes(const SparseAttentionParams& p, const SplitGeom& g) {
  return size_t(p.tokens) * size_t(p.heads) * size_t(g.splits) * size_t(p.dim + 2) * sizeof(float);
}

// Heads per block: each key row is read (and, for a pool record, decoded) once for G heads; 4 when that
// still leaves 4 blocks per SM or the chunks are long (>= 256 keys: enough work per block), else 1.
// H200, 4 Flash layers at batch 1: 128K context (chunks of 128 keys) 277.3 us per layer with 4, 269.2
// with 1; 1M context (chunks of 520) 375.2 with 4, 423.0 with 1. Both give the same bits (each head's
// sums are the same sequence either way), so a row does not depend on the call's other rows through it.
int heads_per_block(const DeviceContext& ctx, const SparseAttentionParams& p, const SplitGeom& g) {
  if (p.heads % 4 != 0) return 1;
  return g.chunk >= 256 || p.tokens * (p.heads / 4) * g.splits >= 4 * int64_t(ctx.sm_count()) ? 4 : 1;
}

size_t smem_bytes(int dim, const SplitGeom& g, int G) {
  return (size_t(G) * dim + size_t(G) * g.chunk + size_t(g.chunk)) * sizeof(float);
}

// The combine of row th = token * heads + h, output dims d, d + 1: M = max m_j, den = exp(sink - M) +
// sum_j exp(m_j - M) l_j, out = sum_j exp(m_j - M) o_j / den, the splits in order. The partials are read
// past L1 (__ldcg): in the one-launch form other blocks wrote them.
template <int DIM>
__device__ void combine_pair(const SparseAttentionParams& p, int splits, const float* part, int64_t th, int d) {
  const int h = int(th % p.heads);
  const float* base = part + th * splits * (DIM + 2);
  float M = -INFINITY;
  for (int j = 0; j < splits; ++j) M = fmaxf(M, __ldcg(base + j * (DIM + 2) + DIM));
  float o0 = 0.0f, o1 = 0.0f;
  if (M != -INFINITY) {
    float den = expf(p.sinks[h] - M), a0 = 0.0f, a1 = 0.0f;
    for (int j = 0; j < splits; ++j) {
      const float* q = base + j * (DIM + 2);
      const float m = __ldcg(q + DIM);
      if (m == -INFINITY) continue;
      const float w = expf(m - M);
      den = fmaf(w, __ldcg(q + DIM + 1), den);
      a0 = fmaf(w, __ldcg(q + d), a0);
      a1 = fmaf(w, __ldcg(q + d + 1), a1);
    }
    o0 = a0 / den;
    o1 = a1 / den;
  }
  *reinterpret_cast<__nv_bfloat162*>(p.out + th * DIM + d) = attention_out_pair(p, th / p.heads, d, o0, o1);
}

template <int DIM, int G>
__global__ void __launch_bounds__(kThreads) split_partial_kernel(SparseAttentionParams p, int chunk, int splits,
                                                                  float* part) {
  extern __shared__ float smem[];
  float* qs = smem;                                             // [G][DIM] q as fp32
  float* z = qs + G * DIM;                                      // [G][chunk] logits, then p
  int32_t* idx = reinterpret_cast<int32_t*>(z + G * chunk);     // [chunk] the chunk's rows
  __shared__ float m_s[G], l_s[G];

  const int groups = p.heads / G;
  const int64_t token = blockIdx.x / groups;
  const int h0 = int(blockIdx.x % groups) * G;
  const int split = blockIdx.y;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const rec::KvRows<DIM> rows{p.kv, p.records, p.record_base, p.rec};
  const bf16* qg = p.q + (token * p.heads + h0) * DIM;  // the G heads' rows, contiguous
  for (int i = threadIdx.x; i < G * DIM; i += kThreads) qs[i] = __bfloat162float(qg[i]);
  const int s0 = split * chunk;
  const int n = max(0, min(chunk, p.max_keys - s0));
  const int32_t* ind = p.indices + token * p.max_keys + s0;
  for (int s = threadIdx.x; s < n; s += kThreads) idx[s] = ind[s];
  __syncthreads();

  // Logits: a warp per key, each lane 8 dims per load, the G heads' dots from the same values.
  for (int s = warp; s < n; s += kWarps) {
    const int32_t e = idx[s];
    float acc[G];
#pragma unroll
    for (int g = 0; g < G; ++g) acc[g] = 0.0f;
    if (e >= 0) {
#pragma unroll
      for (int c = lane * 8; c < DIM; c += 32 * 8) {
        float v[8];
        rows.load8f(e, c, v);
#pragma unroll
        for (int g = 0; g < G; ++g)
#pragma unroll
          for (int i = 0; i < 8; ++i) acc[g] = fmaf(qs[g * DIM + c + i], v[i], acc[g]);
      }
#pragma unroll
      for (int g = 0; g < G; ++g) acc[g] = warp_sum(acc[g]);
    }
    if (lane == 0)
#pragma unroll
      for (int g = 0; g < G; ++g) z[g * chunk + s] = e >= 0 ? acc[g] * p.scale : -INFINITY;
  }
  __syncthreads();

  // Per head (a warp each): the chunk's max m, p = exp(z - m) and l = sum p (no key: m = -inf, p 0).
  for (int g = warp; g < G; g += kWarps) {
    float* zg = z + g * chunk;
    float m = -INFINITY;
    for (int s = lane; s < n; s += 32) m = fmaxf(m, zg[s]);
    m = warp_max(m);
    float l = 0.0f;
    for (int s = lane; s < n; s += 32) {
      const float pe = m == -INFINITY ? 0.0f : expf(zg[s] - m);
      zg[s] = pe;
      l += pe;
    }
    l = warp_sum(l);
    if (lane == 0) {
      m_s[g] = m;
      l_s[g] = l;
    }
  }
  __syncthreads();

  // P.V: two dims per thread for the G heads, bf16(p) as the reference rounds P.
  const int d = threadIdx.x * 2;
  if (d < DIM) {
    float a[G][2];
#pragma unroll
    for (int g = 0; g < G; ++g) a[g][0] = a[g][1] = 0.0f;
#pragma unroll 2
    for (int s = 0; s < n; ++s) {
      const int32_t e = idx[s];
      if (e < 0) continue;
      const float2 v = rows.load2(e, d);
#pragma unroll
      for (int g = 0; g < G; ++g) {
        const float pr = __bfloat162float(__float2bfloat16_rn(z[g * chunk + s]));
        a[g][0] = fmaf(pr, v.x, a[g][0]);
        a[g][1] = fmaf(pr, v.y, a[g][1]);
      }
    }
#pragma unroll
    for (int g = 0; g < G; ++g) {
      float* out = part + ((token * p.heads + h0 + g) * splits + split) * (DIM + 2);
      out[d] = a[g][0];
      out[d + 1] = a[g][1];
    }
  }
  if (threadIdx.x < G) {
    float* out = part + ((token * p.heads + h0 + threadIdx.x) * splits + split) * (DIM + 2);
    out[DIM] = m_s[threadIdx.x];
    out[DIM + 1] = l_s[threadIdx.x];
  }
  if (!p.tickets) return;
  // The one-launch form: the last of the (token, head group)'s split blocks combines its G rows.
  __shared__ bool last;
  __syncthreads();
  if (threadIdx.x == 0) {
    __threadfence();  // this block's partials before its ticket
    last = atomicAdd(p.tickets + blockIdx.x, 1) == splits - 1;
  }
  __syncthreads();
  if (!last) return;
  __threadfence();
  if (d < DIM)
    for (int g = 0; g < G; ++g) combine_pair<DIM>(p, splits, part, token * p.heads + h0 + g, d);
  if (threadIdx.x == 0) p.tickets[blockIdx.x] = 0;  // zero again for the next launch
}

template <int DIM>
__global__ void __launch_bounds__(DIM / 2) split_combine_kernel(SparseAttentionParams p, int splits, const float* part) {
  combine_pair<DIM>(p, splits, part, blockIdx.x, threadIdx.x * 2);
}

template <int DIM, int G>
void launch(const DeviceContext& ctx, const SparseAttentionParams& p, const SplitGeom& g) {
  float* part = static_cast<float*>(ctx.workspace());
  const size_t smem = smem_bytes(DIM, g, G);
  auto partial = split_partial_kernel<DIM, G>;
  if (smem > 48 * 1024) allow_max_dynamic_smem(ctx, partial);
  const unsigned rows = unsigned(narrow_int(p.tokens * p.heads, "sparse_attention_split rows"));
  const unsigned blocks = unsigned(p.tokens * (p.heads / G));
  partial<<<dim3(blocks, unsigned(g.splits)), kThreads, smem, ctx.stream()>>>(p, g.chunk, g.splits, part);
  DSV4_CUDA_CHECK_LAUNCH();
  if (p.tickets) return;  // combined by the last split block of each (token, head group)
  split_combine_kernel<DIM><<<rows, DIM / 2, 0, ctx.stream()>>>(p, g.splits, part);
  DSV4_CUDA_CHECK_LAUNCH();
}

}  // namespace

bool sparse_attention_split_supported(const DeviceContext& ctx, const SparseAttentionParams& p) {
  if (p.tokens < 1 || p.tokens > kSplitAttentionMaxTokens || p.max_keys < 1 || p.heads < 1) return false;
  if (p.dim != 128 && p.dim != 256 && p.dim != 512) return false;
  const SplitGeom g = split_geom(p.max_keys);
  return ctx.workspace() && partial_bytes(p, g) <= ctx.workspace_bytes() &&
         smem_bytes(p.dim, g, heads_per_block(ctx, p, g)) + 2 * sizeof(float) * 4 + 16 <= ctx.max_smem_per_block();
}

void sparse_attention_split(const DeviceContext& ctx, const SparseAttentionParams& p) {
  if (!p.q || !p.kv || !p.indices || !p.sinks || !p.out) fail("sparse_attention_split: null pointer");
  check_attention_records(p, "sparse_attention_split");
  if (!sparse_attention_split_supported(ctx, p))
    fail("sparse_attention_split: ", p.tokens, " tokens x ", p.heads, " heads x ", p.max_keys, " keys of dim ", p.dim,
         " not supported (at most ", kSplitAttentionMaxTokens, " tokens, dim 128 / 256 / 512, partials within the ",
         ctx.workspace_bytes(), "-byte workspace)");
  const SplitGeom g = split_geom(p.max_keys);
  const bool four = heads_per_block(ctx, p, g) == 4;
  switch (p.dim) {
    case 128: return four ? launch<128, 4>(ctx, p, g) : launch<128, 1>(ctx, p, g);
    case 256: return four ? launch<256, 4>(ctx, p, g) : launch<256, 1>(ctx, p, g);
    default: return four ? launch<512, 4>(ctx, p, g) : launch<512, 1>(ctx, p, g);
  }
}

}  // namespace dsv4::cuda
