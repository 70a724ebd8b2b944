// Sampling kernel (contract in sampling.h).
#include <cstdint>

#include "backend/cuda/check.h"
#include "backend/cuda/kernel_util.cuh"
#include "backend/cuda/sampling.h"

namespace dsv4::cuda {
namespace {

constexpr int kThreads = 1024;
constexpr int kWarps = kThreads / 32;

// Monotone map float -> uint32 (larger float, larger key); NaN maps above +inf and is never kept.
__device__ __forceinline__ uint32_t order_key(float z) {
  const uint32_t b = __float_as_uint(z);
  return (b & 0x80000000u) ? ~b : (b | 0x80000000u);
}

struct Row {
  const float* z;
  int64_t vocab;
};

__device__ float block_sum(float v, float* red) {
  v = warp_sum(v);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  __syncthreads();
  if (lane == 0) red[warp] = v;
  __syncthreads();
  float s = 0.0f;
  for (int w = 0; w < kWarps; ++w) s += red[w];  // fixed order: every thread gets the same sum
  return s;
}

__device__ int64_t block_count(int64_t v, float* red) {
  // Counts fit a float exactly up to 2^24 elements per row.
  return int64_t(block_sum(float(v), red));
}

struct Shared {
  float red[kWarps];
  float part[kThreads];
  int arg_i[kWarps];
  float arg_v[kWarps];
  int pick_thread;
  float pick_u;
};

// One row. kMasked: the ids whose bit in `mask` is clear read as NaN (never candidates); the
// unmasked instance reads no mask at all.
template <bool kMasked>
__device__ __forceinline__ void sample_row(const SampleParams& p, int64_t row, const uint32_t* mask, Shared& sh) {
  float* red = sh.red;
  float* part = sh.part;
  int* arg_i = sh.arg_i;
  float* arg_v = sh.arg_v;
  int& pick_thread = sh.pick_thread;
  float& pick_u = sh.pick_u;
  const float* zrow = p.logits + row * p.logits_stride;
  const int64_t V = p.vocab;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  struct Logits {
    const float* z;
    const uint32_t* m;
    __device__ float operator[](int64_t i) const {
      if constexpr (kMasked) {
        if (!((__ldg(m + (i >> 5)) >> (i & 31)) & 1u)) return __int_as_float(0x7fc00000);  // NaN
      }
      return z[i];
    }
  } const z{zrow, mask};

  // Argmax, ties to the lower id (NaN ignored).
  float bv = -INFINITY;
  int64_t bi = V;
  for (int64_t i = threadIdx.x; i < V; i += kThreads) {
    const float v = z[i];
    if (!isnan(v) && (bi == V || v > bv)) {
      bv = v;
      bi = i;
    }
  }
  for (int o = 16; o > 0; o >>= 1) {
    const float ov = __shfl_xor_sync(0xffffffffu, bv, o);
    const int64_t oi = __shfl_xor_sync(0xffffffffu, bi, o);
    if (ov > bv || (ov == bv && oi < bi)) {
      bv = ov;
      bi = oi;
    }
  }
  if (lane == 0) {
    arg_v[warp] = bv;
    arg_i[warp] = int(bi);
  }
  __syncthreads();
  float zmax = arg_v[0];
  int64_t amax = arg_i[0];
  for (int w = 1; w < kWarps; ++w)
    if (arg_v[w] > zmax || (arg_v[w] == zmax && arg_i[w] < amax)) {
      zmax = arg_v[w];
      amax = arg_i[w];
    }
  if (amax >= V) {
    if constexpr (kMasked) {  // the mask allows no id (with a finite logit)
      if (threadIdx.x == 0) p.out[row] = -1;
      return;
    }
    amax = 0;
  }
  const float temp = p.temperature[row];
  const int top_k = p.top_k ? p.top_k[row] : 0;
  if (temp <= 0.0f || top_k == 1) {
    if (threadIdx.x == 0) p.out[row] = int32_t(amax);
    return;
  }

  // Top-k: tk = the largest key with count(key >= tk) >= K; ties at tk kept up to id idcut.
  uint32_t tk = 0;
  int64_t idcut = V;
  if (top_k > 0 && top_k < V) {
    for (int bit = 31; bit >= 0; --bit) {
      const uint32_t cand = tk | (1u << bit);
      int64_t c = 0;
      for (int64_t i = threadIdx.x; i < V; i += kThreads) {
        const float v = z[i];
        c += !isnan(v) && order_key(v) >= cand;
      }
      if (block_count(c, red) >= top_k) tk = cand;
    }
    int64_t gt = 0;
    for (int64_t i = threadIdx.x; i < V; i += kThreads) {
      const float v = z[i];
      gt += !isnan(v) && order_key(v) > tk;
    }
    const int64_t need = top_k - block_count(gt, red);  // >= 1 ties at tk to keep, lowest ids first
    int64_t ans = 0;
    for (int bit = 63 - __clzll(V); bit >= 0; --bit) {
      const int64_t cand = ans | (int64_t(1) << bit);
      int64_t c = 0;
      for (int64_t i = threadIdx.x; i < min(cand, V); i += kThreads) {
        const float v = z[i];
        c += !isnan(v) && order_key(v) == tk;
      }
      if (block_count(c, red) < need) ans = cand;
    }
    idcut = ans;  // the need-th tie has id ans
  }
  auto in_topk = [&](int64_t i, float v) {
    if (isnan(v)) return false;
    const uint32_t k = order_key(v);
    return k > tk || (k == tk && i <= idcut);
  };
  const float mx = zmax / temp;
  auto prob = [&](float v) { return expf(v / temp - mx); };

  float sum = 0.0f;
  for (int64_t i = threadIdx.x; i < V; i += kThreads)
    if (const float v = z[i]; in_topk(i, v)) sum += prob(v);
  sum = block_sum(sum, red);

  // Top-p: tp = the largest key whose candidates at or above it hold >= top_p of the mass.
  uint32_t tp = 0;
  const float top_p = p.top_p ? p.top_p[row] : 1.0f;
  if (top_p < 1.0f) {
    const float target = top_p * sum;
    for (int bit = 31; bit >= 0; --bit) {
      const uint32_t cand = tp | (1u << bit);
      float m = 0.0f;
      for (int64_t i = threadIdx.x; i < V; i += kThreads)
        if (const float v = z[i]; in_topk(i, v) && order_key(v) >= cand) m += prob(v);
      if (block_sum(m, red) >= target) tp = cand;
    }
  }
  const float min_p = p.min_p ? p.min_p[row] : 0.0f;  // p_i / p_max >= min_p, p_max's weight is 1
  auto kept_mass = [&](int64_t i) {
    const float v = z[i];
    if (!in_topk(i, v) || order_key(v) < tp) return 0.0f;
    const float q = prob(v);
    return q >= min_p ? q : 0.0f;
  };

  // Draw: thread c owns ids [c * chunk, (c + 1) * chunk); prefix over threads, then a walk.
  const int64_t chunk = (V + kThreads - 1) / kThreads;
  const int64_t lo = threadIdx.x * chunk, hi = min(V, lo + chunk);
  float m = 0.0f;
  for (int64_t i = lo; i < hi; ++i) m += kept_mass(i);
  part[threadIdx.x] = m;
  __syncthreads();
  if (threadIdx.x == 0) {
    float total = 0.0f;
    for (int c = 0; c < kThreads; ++c) total += part[c];
    const float u = float(philox_uniform(p.seed[row], p.step[row])) * total;
    float cum = 0.0f;
    int sel = -1, last = 0;
    for (int c = 0; c < kThreads; ++c) {
      if (part[c] > 0.0f) last = c;
      if (sel < 0 && part[c] > 0.0f && u < cum + part[c]) {
        sel = c;
        pick_u = u - cum;
      }
      cum += part[c];
    }
    if (sel < 0) {  // rounding: u landed past the last interval
      sel = last;
      pick_u = part[last];
    }
    pick_thread = sel;
  }
  __syncthreads();
  if (int(threadIdx.x) == pick_thread) {
    float cum = 0.0f;
    int64_t chosen = -1, last = amax;
    for (int64_t i = lo; i < hi; ++i) {
      const float q = kept_mass(i);
      if (q <= 0.0f) continue;
      last = i;
      cum += q;
      if (pick_u < cum) {
        chosen = i;
        break;
      }
    }
    p.out[row] = int32_t(chosen >= 0 ? chosen : last);
  }
}

__global__ void sample_kernel(SampleParams p) {
  __shared__ Shared sh;
  const int64_t row = blockIdx.x;
  if (p.masked && p.masked[row])
    sample_row<true>(p, row, p.mask + row * p.mask_stride, sh);
  else
    sample_row<false>(p, row, nullptr, sh);
}

}  // namespace

void sample_tokens(const DeviceContext& ctx, const SampleParams& p) {
  if (p.rows == 0) return;
  if (!p.logits || !p.out || !p.temperature || !p.seed || !p.step) fail("sample_tokens: null pointer");
  if (p.vocab <= 0 || p.vocab >= (int64_t(1) << 24)) fail("sample_tokens: vocab ", p.vocab, " (1 .. 2^24)");
  if (p.logits_stride < p.vocab) fail("sample_tokens: logits_stride < vocab");
  if (p.masked && (!p.mask || p.mask_stride < (p.vocab + 31) / 32))
    fail("sample_tokens: masked rows need a mask of at least ", (p.vocab + 31) / 32, " words per row");
  sample_kernel<<<unsigned(narrow_int(p.rows, "sample rows")), kThreads, 0, ctx.stream()>>>(p);
  DSV4_CUDA_CHECK_LAUNCH();
}

}  // namespace dsv4::cuda
