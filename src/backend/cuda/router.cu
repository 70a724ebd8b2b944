// MoE router kernels (contract in moe_ops.h; CPU twin: the router part of Model::moe).
#include <cstdint>

#include "backend/cuda/act_quant.cuh"
#include "backend/cuda/async_copy.cuh"
#include "backend/cuda/check.h"
#include "backend/cuda/cpu_math.cuh"
#include "backend/cuda/kernel_util.cuh"
#include "backend/cuda/moe_ops.h"

namespace dsv4::cuda {
namespace {

constexpr int kSelectThreads = 256;
constexpr int kMaxExperts = 1024;
constexpr int kMaxPicks = 16;
// The tiled scores kernel from kTileMinTokens tokens (two-launch form), its wide tiles from kTileWideTokens.
constexpr int64_t kTileMinTokens = 64;
constexpr int64_t kTileWideTokens = 512;

__device__ __forceinline__ float dot8(const bf16* a, const bf16* b) {
  const uint4 ra = *reinterpret_cast<const uint4*>(a), rb = *reinterpret_cast<const uint4*>(b);
  const __nv_bfloat162* ha = reinterpret_cast<const __nv_bfloat162*>(&ra);
  const __nv_bfloat162* hb = reinterpret_cast<const __nv_bfloat162*>(&rb);
  float s = 0.0f;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 fa = __bfloat1622float2(ha[i]), fb = __bfloat1622float2(hb[i]);
    s = fmaf(fa.x, fb.x, s);
    s = fmaf(fa.y, fb.y, s);
  }
  return s;
}

// sqrt(softplus(z)): the score of a logit.
__device__ __forceinline__ float score_of_logit(float z) {
  const float sp = z > 20.0f ? z : log1p_f32(exp_f32(z));
  return sqrtf(sp);
}

// x's codes of token t, 128-block b by one warp (4 values per lane), as act_quant_rows computes them.
__device__ void router_codes(const RouterParams& p, int64_t t, int b, int lane) {
  const int c = b * 128 + lane * 4;
  const uint2 raw = *reinterpret_cast<const uint2*>(p.x + t * p.D + c);
  const __nv_bfloat162* h = reinterpret_cast<const __nv_bfloat162*>(&raw);
  float q[4];
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const float2 f = __bfloat1622float2(h[i]);
    q[2 * i] = f.x;
    q[2 * i + 1] = f.y;
  }
  float amax = fmaxf(fmaxf(fabsf(q[0]), fabsf(q[1])), fmaxf(fabsf(q[2]), fabsf(q[3])));
  amax = warp_max(amax);
  const float sc = fp8_block_scale(amax);
  uint32_t code = 0;
#pragma unroll
  for (int i = 0; i < 4; ++i) code |= fp8_code(q[i], sc) << (8 * i);
  *reinterpret_cast<uint32_t*>(p.codes + t * p.D + c) = code;
  if (lane == 0) p.scales[t * p.sf_row_stride + int64_t(b) * p.sf_block_stride] = sc;
}

// Token t's picks and their weights from its scores, by a block of kSelectThreads threads. The scores are
// read past L1 (__ldcg): in the one-launch form other blocks wrote them.
// kLogits (RouterParams::logits_given): the scores hold the logits, which the block turns into scores first.
template <bool kLogits>
__device__ void router_select(const RouterParams& p, int64_t t) {
  float* s = p.scores + t * p.E;
  __shared__ float val[kMaxExperts];
  __shared__ int picks[kMaxPicks];
  __shared__ float red_v[kSelectThreads / 32];
  __shared__ int red_i[kSelectThreads / 32];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if constexpr (kLogits) {  // the token's logits -> scores in place (every later read is of this block's writes)
    for (int e = threadIdx.x; e < p.E; e += blockDim.x) s[e] = score_of_logit(__ldcg(s + e));
    __syncthreads();
  }

  if (p.tid2eid) {
    if (threadIdx.x == 0) {
      int64_t tok = p.token_ids[t];
      if (tok < 0 || tok >= p.vocab) {
        if (p.bad) *p.bad = 1;
        tok = tok < 0 ? 0 : p.vocab - 1;
      }
      for (int i = 0; i < p.k; ++i) {
        int e = p.tid2eid[tok * p.k + i];
        if (e < 0 || e >= p.E) {
          if (p.bad) *p.bad = 1;
          e = e < 0 ? 0 : p.E - 1;
        }
        picks[i] = e;
      }
    }
  } else {
    for (int e = threadIdx.x; e < p.E; e += blockDim.x) val[e] = __ldcg(s + e) + p.bias[e];
    __syncthreads();
    for (int i = 0; i < p.k; ++i) {
      float bv = -INFINITY;
      int bi = p.E;  // none
      for (int e = threadIdx.x; e < p.E; e += blockDim.x) {
        const float v = val[e];  // NaN: picked already
        if (!isnan(v) && (bi == p.E || v > bv)) {  // ascending e: equal values keep the lower id
          bv = v;
          bi = e;
        }
      }
#pragma unroll
      for (int o = 16; o > 0; o >>= 1) {
        const float ov = __shfl_xor_sync(0xffffffffu, bv, o);
        const int oi = __shfl_xor_sync(0xffffffffu, bi, o);
        if (ov > bv || (ov == bv && oi < bi)) {
          bv = ov;
          bi = oi;
        }
      }
      if (lane == 0) {
        red_v[warp] = bv;
        red_i[warp] = bi;
      }
      __syncthreads();
      if (threadIdx.x == 0) {
        float v0 = red_v[0];
        int i0 = red_i[0];
        for (int w = 1; w < kSelectThreads / 32; ++w)
          if (red_v[w] > v0 || (red_v[w] == v0 && red_i[w] < i0)) {
            v0 = red_v[w];
            i0 = red_i[w];
          }
        if (i0 >= p.E) i0 = 0;  // only with NaN scores
        picks[i] = i0;
        val[i0] = NAN;  // excluded: NaN never compares greater
      }
      __syncthreads();
    }
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    float w[kMaxPicks];
    float sum = 0.0f;
    for (int i = 0; i < p.k; ++i) sum += (w[i] = __ldcg(s + picks[i]));
    for (int i = 0; i < p.k; ++i) {
      const float v = p.norm_topk_prob ? w[i] / sum : w[i];
      p.ids[t * p.k + i] = picks[i];
      p.weights[t * p.k + i] = v * p.scaling;
    }
  }
}

// One warp per (token, expert): fp32 dot product, then sqrt(softplus(.)); blocks of kSelectThreads threads.
// With tickets (E % 8 == 0: a block holds 8 experts of one token), the last block done with a token's
// scores selects its picks and resets the ticket.
__global__ void __launch_bounds__(kSelectThreads) router_scores_kernel(RouterParams p, int64_t warps) {
  const int64_t w = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) >> 5;
  const int lane = threadIdx.x & 31;
  if (w < warps) {
    const int64_t t = w / p.E;
    const int e = int(w % p.E);
    const bf16* x = p.x + t * p.D;
    const bf16* g = p.gate + int64_t(e) * p.D;
    float acc = 0.0f;
    for (int c = lane * 8; c < p.D; c += 256) acc += dot8(x + c, g + c);
    acc = warp_sum(acc);
    if (lane == 0) p.scores[t * p.E + e] = score_of_logit(acc);
    // With codes, expert e's warp also quantizes x's 128-blocks e, e + E, ... (one round each for Flash).
    if (p.codes)
      for (int b = e; b < p.D / 128; b += p.E) router_codes(p, t, b, lane);
  }
  if (!p.tickets) return;
  const int64_t t = int64_t(blockIdx.x) / (p.E / 8);
  __shared__ bool last;
  __syncthreads();
  if (threadIdx.x == 0) {
    __threadfence();  // this block's scores before its ticket
    last = atomicAdd(p.tickets + t, 1) == p.E / 8 - 1;
  }
  __syncthreads();
  if (!last) return;
  __threadfence();
  router_select<false>(p, t);
  if (threadIdx.x == 0) p.tickets[t] = 0;  // zero again for the next launch
}

// Two launches at many tokens: block (tile of BT = WT * TW tokens, tile of BE = WE * EW experts), warp
// (wt, we) the TW x EW pairs of tokens wt * TW .. and experts we * EW ... Each 256-column step of x's and
// the gate's rows is staged once in shared memory for the whole tile (cp.async, kTileStages deep). The
// bits are router_scores_kernel's: lane L accumulates, for each of its pairs, dot8 of the chunks
// c = 8L, 8L + 256, ... in order (the same fmaf chain added to the same running float), then warp_sum's
// xor tree, transposed: at offset o (16, 8, .., 1) a lane keeps half of its pairs (the upper half where
// lane & o) and adds the partner's value of each, v_L + v_(L^o) as warp_sum adds them (addition commutes,
// so both lanes of a step hold the same bits). After the 5 steps lane L holds pairs (kPairs / 32) L + j
// with the value warp_sum leaves in every lane.
constexpr int kTileStages = 3;

template <int WT, int WE, int TW, int EW>
size_t router_tile_smem() {
  return size_t(kTileStages) * size_t(WT * TW + WE * EW) * 32 * sizeof(uint4);
}

template <int WT, int WE, int TW, int EW>
__global__ void __launch_bounds__(WT * WE * 32) router_scores_tile_kernel(RouterParams p) {
  constexpr int kThr = WT * WE * 32, BT = WT * TW, BE = WE * EW, kRowsS = BT + BE, kPairs = TW * EW;
  static_assert(kPairs % 32 == 0 && (kPairs & (kPairs - 1)) == 0);
  extern __shared__ uint4 rs_smem[];  // [kTileStages][kRowsS][32]: 8 bf16 per entry; x's rows, then the gate's
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, wt = warp % WT, we = warp / WT;
  const int64_t t0 = int64_t(blockIdx.x) * BT;
  const int e0 = int(blockIdx.y) * BE;
  const int steps = (p.D + 255) / 256;
  auto issue = [&](int i) {
    uint4* st = rs_smem + (i % kTileStages) * kRowsS * 32;
#pragma unroll
    for (int q = 0; q < (kRowsS * 32 + kThr - 1) / kThr; ++q) {
      const int idx = tid + q * kThr;
      if (idx >= kRowsS * 32) break;
      const int row = idx >> 5, c = i * 256 + (idx & 31) * 8;
      const bf16* src = p.x;
      bool valid = c < p.D;
      if (row < BT) {
        valid = valid && t0 + row < p.T;
        if (valid) src = p.x + (t0 + row) * p.D + c;
      } else {
        valid = valid && e0 + row - BT < p.E;
        if (valid) src = p.gate + int64_t(e0 + row - BT) * p.D + c;
      }
      cp_async16(st + idx, src, valid);  // zeros past the rows (never used: see c < D below)
    }
  };
#pragma unroll
  for (int s = 0; s < kTileStages - 1; ++s) {
    if (s < steps) issue(s);
    cp_async_commit();
  }
  float v[kPairs];  // pair tt * EW + ee
#pragma unroll
  for (int q = 0; q < kPairs; ++q) v[q] = 0.0f;
  for (int i = 0; i < steps; ++i) {
    cp_async_wait<kTileStages - 2>();
    __syncthreads();  // step i landed for every thread; step i - 1's stage is free
    if (i + kTileStages - 1 < steps) issue(i + kTileStages - 1);
    cp_async_commit();
    if (i * 256 + lane * 8 >= p.D) continue;  // as router_scores_kernel's loop bound
    const uint4* st = rs_smem + (i % kTileStages) * kRowsS * 32;
    float xv[TW][8];
#pragma unroll
    for (int tt = 0; tt < TW; ++tt) bf16x8_values(st[(wt * TW + tt) * 32 + lane], xv[tt]);
#pragma unroll
    for (int ee = 0; ee < EW; ++ee) {
      float g[8];
      bf16x8_values(st[(BT + we * EW + ee) * 32 + lane], g);
#pragma unroll
      for (int tt = 0; tt < TW; ++tt) {
        float s = 0.0f;  // dot8(x + c, g + c)
#pragma unroll
        for (int q = 0; q < 8; ++q) s = fmaf(xv[tt][q], g[q], s);
        v[tt * EW + ee] += s;
      }
    }
  }
  cp_async_wait<0>();  // (only empty groups can be left)
#pragma unroll
  for (int lvl = 0; lvl < 5; ++lvl) {
    const int o = 16 >> lvl, half = kPairs >> (lvl + 1);
    const bool up = (lane & o) != 0;
#pragma unroll
    for (int j = 0; j < kPairs / 2; ++j) {
      if (j >= half) break;
      const float send = up ? v[j] : v[j + half], keep = up ? v[j + half] : v[j];
      v[j] = keep + __shfl_xor_sync(0xffffffffu, send, o);
    }
  }
#pragma unroll
  for (int j = 0; j < kPairs / 32; ++j) {
    const int pair = (kPairs / 32) * lane + j, tt = pair / EW, ee = pair % EW;
    const int64_t t = t0 + wt * TW + tt;
    const int e = e0 + we * EW + ee;
    if (t < p.T && e < p.E) p.scores[t * p.E + e] = score_of_logit(v[j]);
  }
}

template <int WT, int WE, int TW, int EW>
void launch_router_tile(const DeviceContext& ctx, const RouterParams& p) {
  auto kernel = router_scores_tile_kernel<WT, WE, TW, EW>;
  const size_t smem = router_tile_smem<WT, WE, TW, EW>();
  if (smem > 48 * 1024 && smem > size_t(allow_max_dynamic_smem(ctx, kernel)))
    fail("moe_router: ", smem, " bytes of shared memory per block");
  const dim3 grid(unsigned(narrow_int(ceil_div(p.T, WT * TW), "moe_router tiles")), unsigned(ceil_div(p.E, WE * EW)));
  kernel<<<grid, WT * WE * 32, smem, ctx.stream()>>>(p);
  DSV4_CUDA_CHECK_LAUNCH();
}

template <bool kLogits>
__global__ void __launch_bounds__(kSelectThreads) router_select_kernel(RouterParams p) {
  router_select<kLogits>(p, blockIdx.x);
}

}  // namespace

void moe_router(const DeviceContext& ctx, const RouterParams& p) {
  if (p.T == 0) return;
  if (!p.x || !p.gate || !p.scores || !p.ids || !p.weights) fail("moe_router: null pointer");
  if (p.tid2eid ? !p.token_ids : !p.bias) fail("moe_router: hash routing needs token ids, top-k routing a bias");
  if (p.D <= 0 || p.D % 8 != 0) fail("moe_router: D ", p.D, " must be a positive multiple of 8");
  if (p.E <= 0 || p.E > kMaxExperts) fail("moe_router: ", p.E, " experts (1..", kMaxExperts, ")");
  if (p.k <= 0 || p.k > kMaxPicks || p.k > p.E) fail("moe_router: k = ", p.k, " (1..", kMaxPicks, ", <= E)");
  if (p.tid2eid && p.vocab <= 0) fail("moe_router: hash routing needs the vocabulary size");
  if (p.tickets && p.E % 8 != 0) fail("moe_router: the one-launch form needs E % 8 == 0 (E ", p.E, ")");
  if (p.codes && (!p.scales || p.D % 128 != 0))
    fail("moe_router: x's codes need scales and D % 128 == 0 (D ", p.D, ")");
  if (p.logits_given && (p.tickets || p.codes)) fail("moe_router: given logits take neither tickets nor codes");
  if (p.logits_given) {
    // the selection only (it turns the logits into scores)
  } else if (!p.tickets && !p.codes && p.T >= kTileMinTokens) {  // the tiled scores (the same bits), then select
    if (p.T >= kTileWideTokens) launch_router_tile<4, 2, 8, 8>(ctx, p);  // 32 tokens x 16 experts a block
    else launch_router_tile<2, 2, 4, 8>(ctx, p);                          // 8 tokens x 16 experts a block
  } else {
    const int64_t warps = p.T * p.E;
    const int64_t blocks = ceil_div(warps * 32, kSelectThreads);
    router_scores_kernel<<<unsigned(narrow_int(blocks, "moe_router blocks")), kSelectThreads, 0, ctx.stream()>>>(p,
                                                                                                                 warps);
    DSV4_CUDA_CHECK_LAUNCH();
  }
  if (p.tickets) return;
  const unsigned blocks = unsigned(narrow_int(p.T, "moe_router tokens"));
  if (p.logits_given)
    router_select_kernel<true><<<blocks, kSelectThreads, 0, ctx.stream()>>>(p);
  else
    router_select_kernel<false><<<blocks, kSelectThreads, 0, ctx.stream()>>>(p);
  DSV4_CUDA_CHECK_LAUNCH();
}

}  // namespace dsv4::cuda
