// stream_gemv (contract and design in linear_stream.h).
//
// Per CTA (256 threads = 2 warpgroups; 128 rows of one projection, chunks c0 .. c0 + nCu - 1 of its K):
//   shared memory = [ B: N x nCu * 128 f16 activations | their scales: N x nCu fp32 | 8 warp rings ]
//   B layout per 16-k step kb (kb = 8 i + s of local chunk i): (N / 8) row groups x 2 core matrices
//   (8 rows x 8 halves) at (kb * N / 8 + n / 8) * 256 + half * 128 + (n % 8) * 16: the wgmma K-major
//   no-swizzle operand with LBO = 128, SBO = 256.
//   A warp's ring slot (one chunk): 4 quarters of 512 bytes (row g bytes 0-63, row g bytes 64-127, row
//   g + 8 bytes 0-63, row g + 8 bytes 64-127 of the chunk; lane (g, t) holds bytes 16t .. 16t + 15 of its
//   row in each), then the chunk's fp32 weight scale; lane L copies and reads its own 16-byte pieces.
// The k permutation: in a chunk, 16-k step s takes from lane t the 4 row bytes P(s, t) .. + 3 with
// P(s, t) = 64 (s / 4) + 16 t + 4 (s % 4) (word s % 4 of the lane's quarter s / 4); bytes 0-1 become the f16
// A register of logical k 2t, 2t + 1, bytes 2-3 of k 8 + 2t, 9 + 2t (the f16 A fragment of wgmma
// m64nNk16), and B is stored with the same map (a dot product is invariant under a common permutation of
// k inside a scale block). e4m3 -> f16 is exact.
#include "backend/cuda/linear_stream.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cstdint>
#include <string>
#include <type_traits>

#include "backend/cuda/async_copy.cuh"
#include "backend/cuda/check.h"
#include "backend/cuda/kernel_util.cuh"
#include "backend/cuda/wgmma.cuh"
#include "core/error.h"

namespace dsv4::cuda {
namespace {

constexpr int kThreads = 256;  // two warpgroups
constexpr int kWarps = kThreads / 32;
constexpr int kRows = 128;     // output rows per CTA (the weight scale block)
constexpr int kSlot = 2048 + 16;
constexpr int kMaxSplits = 16;
constexpr int64_t kTwoPerSm = (int64_t(228) << 10) / 2 - 1024;  // dynamic shared memory for 2 CTAs per SM

struct Args {
  FastGemvParams p;
  int block0[kFastMaxProjections + 1];  // first 128-row block of each projection; [nproj] = total
  int splits;                           // CTAs (cluster ranks) per row block
};

__host__ __device__ constexpr int64_t align16(int64_t v) { return (v + 15) / 16 * 16; }
// Dynamic shared memory of a CTA with nCu chunks of N token columns and S ring slots per warp.
__host__ __device__ constexpr int64_t smem_bytes(int N, int64_t nCu, int S) {
  return align16(int64_t(N) * nCu * 256 + int64_t(N) * nCu * 4) + int64_t(kWarps) * S * kSlot;
}

// Two e4m3 codes (low byte first) as f16x2, low half first: exact.
__device__ __forceinline__ uint32_t e4m3x2_f16x2(uint32_t two) {
  const __half2_raw h = __nv_cvt_fp8x2_to_halfraw2(__nv_fp8x2_storage_t(two & 0xffffu), __NV_E4M3);
  return uint32_t(h.x) | (uint32_t(h.y) << 16);
}

// kPipe: the MMAs of chunk i are promoted after chunk i + 1's are issued (two A buffers: N <= 16).
template <int N, int S, bool kPipe>
__global__ void __launch_bounds__(kThreads, 2) stream_gemv_kernel(const __grid_constant__ Args a) {
  static_assert(N == 8 || N == 16 || N == 32, "token columns: the wgmma N");
  static_assert(S >= 2, "ring depth");
  static_assert(kRows * N * 4 <= kWarps * S * kSlot, "the partial sums reuse the rings");
  constexpr int kAcc = N / 2;
  constexpr int kBufs = kPipe ? 2 : 1;
  const FastGemvParams& p = a.p;
  const int splits = a.splits;
  const int rbg = int(blockIdx.x) / splits, split = int(blockIdx.x) % splits;
  int pi = 0;
  while (pi + 1 < p.nproj && rbg >= a.block0[pi + 1]) ++pi;
  const FastProjection& pr = p.proj[pi];
  const int rb = rbg - a.block0[pi];
  const int nCu = p.in / 128 / splits, c0 = split * nCu;
  const int tid = int(threadIdx.x), warp = tid / 32, lane = tid % 32, g = lane / 4, t = lane % 4;

  extern __shared__ __align__(128) uint8_t smem[];
  uint8_t* sB = smem;
  float* sS = reinterpret_cast<float*>(smem + N * nCu * 256);  // [N][nCu]
  uint8_t* rings = smem + align16(int64_t(N) * nCu * 256 + int64_t(N) * nCu * 4);
  uint8_t* ring = rings + warp * S * kSlot;
  const uint32_t ring_s = smem_u32(ring);

  // This warp's rows 16 warp + g and + 8 of the block (clamped: rows past `out` are computed, not stored).
  const int row0 = rb * kRows + warp * 16;
  const int64_t ra = min(row0 + g, pr.out - 1), rr = min(row0 + g + 8, pr.out - 1);
  const uint8_t* wa = pr.w8 + ra * p.in + int64_t(c0) * 128 + t * 16;
  const uint8_t* wb = pr.w8 + rr * p.in + int64_t(c0) * 128 + t * 16;
  const float* wsc = pr.w_scales + int64_t(rb) * pr.w_scale_ld + c0;
  int issued = 0;
  auto issue = [&]() {
    if (issued < nCu) {
      const uint32_t slot = ring_s + uint32_t((issued % S) * kSlot);
      const int64_t k = int64_t(issued) * 128;
      cp_async16(slot + lane * 16, wa + k);
      cp_async16(slot + 512 + lane * 16, wa + k + 64);
      cp_async16(slot + 1024 + lane * 16, wb + k);
      cp_async16(slot + 1536 + lane * 16, wb + k + 64);
      if (lane == 0) cp_async4(slot + 2048, wsc + issued);
      ++issued;
    }
    cp_async_commit();  // an empty group past the end keeps the wait counts uniform
  };
  // Launched with launch_cluster_pdl: the weights are constant, so the ring fills while the kernel before
  // (the activations' quantization) finishes; the activations are read after the wait.
  allow_dependents();
#pragma unroll
  for (int c = 0; c < S - 1; ++c) issue();
  grid_dependency_wait();

  // B: word w of 16-byte piece u of a chunk row is group (s = 4 (u / 4) + w, t = u % 4): its bytes 0-1 as
  // f16 to core matrix 0 at 4t, bytes 2-3 to core matrix 1.
  const int pieces = nCu * 8;
  const uint8_t* xrow = p.x_codes + pr.x_offset + int64_t(c0) * 128;
  for (int idx = tid; idx < N * pieces; idx += kThreads) {
    const int n = idx / pieces, pc = idx % pieces;
    uint4 v = make_uint4(0u, 0u, 0u, 0u);
    if (n < p.tokens) v = __ldg(reinterpret_cast<const uint4*>(xrow + int64_t(n) * p.x_stride + pc * 16));
    const int i = pc >> 3, u = pc & 7, tt = u & 3;
    uint8_t* base = sB + ((i * 8 + 4 * (u >> 2)) * (N / 8) + n / 8) * 256 + (n % 8) * 16 + 4 * tt;
#pragma unroll
    for (int w = 0; w < 4; ++w) {
      const uint32_t word = word_of(v, w);
      uint8_t* at = base + w * (N / 8) * 256;  // step 4 (u / 4) + w
      *reinterpret_cast<uint32_t*>(at) = e4m3x2_f16x2(word);
      *reinterpret_cast<uint32_t*>(at + 128) = e4m3x2_f16x2(word >> 16);
    }
  }
  for (int idx = tid; idx < N * nCu; idx += kThreads) {
    const int n = idx / nCu, i = idx % nCu;
    sS[idx] = n < p.tokens ? p.x_scales[pr.xs_offset + int64_t(n) * p.xs_row_stride + int64_t(c0 + i) * p.xs_block_stride]
                           : 0.0f;
  }
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");  // B is read by the tensor cores
  __syncthreads();

  float acc[kAcc], tmp[kBufs][kAcc], sw[kBufs];
  uint32_t am[kBufs][8][4];
#pragma unroll
  for (int j = 0; j < kAcc; ++j) {
    acc[j] = 0.0f;
#pragma unroll
    for (int h = 0; h < kBufs; ++h) tmp[h][j] = 0.0f;
  }
  int consumed = 0;
  // Chunk i: its slot's bytes as the f16 A fragments of its 8 steps (refilling the slot read one chunk
  // earlier), its 8 MMAs accumulated in tmp[h] (fp32, in the tensor core).
  auto start_chunk = [&](int i, auto hc) {
    constexpr int h = decltype(hc)::value;
    cp_async_wait<S - 2>();  // the chunk's group is complete for this thread
    __syncwarp();            // ... and the scale word from lane 0
    const uint8_t* slot = ring + (consumed % S) * kSlot;
    ++consumed;
    uint4 q[4];
#pragma unroll
    for (int k = 0; k < 4; ++k) q[k] = *reinterpret_cast<const uint4*>(slot + k * 512 + lane * 16);
    sw[h] = *reinterpret_cast<const float*>(slot + 2048);
    issue();
#pragma unroll
    for (int st = 0; st < 8; ++st) {
      const uint32_t x = word_of(q[st >> 2], st & 3), y = word_of(q[2 + (st >> 2)], st & 3);  // rows g, g + 8
      am[h][st][0] = e4m3x2_f16x2(x);
      am[h][st][2] = e4m3x2_f16x2(x >> 16);
      am[h][st][1] = e4m3x2_f16x2(y);
      am[h][st][3] = e4m3x2_f16x2(y >> 16);
    }
#pragma unroll
    for (int st = 0; st < 8; ++st)
#pragma unroll
      for (int r = 0; r < 4; ++r) fence_u32(am[h][st][r]);
    wgmma_fence();
#pragma unroll
    for (int st = 0; st < 8; ++st)
      wgmma_rs_f16<N>(tmp[h], am[h][st], smem_desc(sB + (i * 8 + st) * (N / 8) * 256, 128, 256), st > 0);
    wgmma_commit();
  };
  // After the wait for chunk i's MMAs: the block sum x weight scale x token scale, into acc.
  auto finish_chunk = [&](int i, auto hc) {
    constexpr int h = decltype(hc)::value;
#pragma unroll
    for (int j = 0; j < kAcc; ++j) fence_f32(tmp[h][j]);
#pragma unroll
    for (int st = 0; st < 8; ++st)
#pragma unroll
      for (int r = 0; r < 4; ++r) fence_u32(am[h][st][r]);  // the A registers live until the MMAs are done
#pragma unroll
    for (int j = 0; j < kAcc; ++j) {
      const int col = 8 * (j >> 2) + 2 * t + (j & 1);
      acc[j] = fmaf(tmp[h][j], sw[h] * sS[col * nCu + i], acc[j]);
    }
  };
  using H0 = std::integral_constant<int, 0>;
  using H1 = std::integral_constant<int, kBufs - 1>;
  if constexpr (kPipe) {
    // Chunks in pairs (buffers 0, 1): the MMAs of one chunk are promoted after the next chunk's are issued.
    int i = 0;
    for (; i + 1 < nCu; i += 2) {
      start_chunk(i, H0{});
      wgmma_wait<1>();
      if (i > 0) finish_chunk(i - 1, H1{});
      start_chunk(i + 1, H1{});
      wgmma_wait<1>();
      finish_chunk(i, H0{});
    }
    if (i < nCu) {  // an odd count: the last chunk in buffer 0
      start_chunk(i, H0{});
      wgmma_wait<1>();
      if (i > 0) finish_chunk(i - 1, H1{});
      wgmma_wait<0>();
      finish_chunk(i, H0{});
    } else {
      wgmma_wait<0>();
      finish_chunk(nCu - 1, H1{});
    }
  } else {
    for (int i = 0; i < nCu; ++i) {
      start_chunk(i, H0{});
      wgmma_wait<0>();
      finish_chunk(i, H0{});
    }
  }

  // Element j: row 16 warp + g + 8 ((j / 2) % 2) of the block, token 8 (j / 4) + 2t + j % 2.
  auto store = [&](int row_in_block, int col, float v) {
    const int row = rb * kRows + row_in_block;
    if (row < pr.out && col < p.tokens) {
      const int64_t at = int64_t(col) * pr.y_stride + row;
      if (pr.y) pr.y[at] = __float2bfloat16_rn(v);
      if (pr.y_f32) pr.y_f32[at] = v;
    }
  };
  if (splits == 1) {
#pragma unroll
    for (int j = 0; j < kAcc; ++j) store(warp * 16 + g + 8 * ((j >> 1) & 1), 8 * (j >> 2) + 2 * t + (j & 1), acc[j]);
    return;
  }
  // K split over the cluster: the partials meet in each rank's (now idle) rings.
  cluster_split_sum<N>(acc, reinterpret_cast<float*>(rings), split, splits, store);
}

template <int N, int S>
void launch(const DeviceContext& ctx, const Args& a, int64_t nCu) {
  const auto kernel = stream_gemv_kernel<N, S, N <= 16>;
  allow_max_dynamic_smem(ctx, kernel);
  const int blocks = a.block0[a.p.nproj] * a.splits;
  launch_cluster_pdl(ctx, kernel, dim3(unsigned(blocks)), dim3(kThreads), a.splits > 1 ? a.splits : 0,
                     size_t(smem_bytes(N, nCu, S)), a);
}

int columns(int64_t tokens) { return tokens <= 8 ? 8 : tokens <= 16 ? 16 : 32; }

// Row blocks of the launch (0: a projection without weight, scales or output).
int64_t row_blocks(const FastGemvParams& p) {
  int64_t r = 0;
  for (int i = 0; i < p.nproj; ++i) r += ceil_div(p.proj[i].out, kRows);
  return r;
}

// Why the launch is not stream_gemv's (empty: it is), split and stage counts aside.
std::string unsupported(const FastGemvParams& p) {
  if (!p.x_codes || !p.x_scales) return "needs FP8 activations (codes and scales)";
  if (p.tokens < 1 || p.tokens > kFastGemvMaxTokens) return "takes 1-32 tokens";
  if (p.in <= 0 || p.in % 128 != 0) return "needs in % 128 == 0";
  if (p.nproj < 1 || p.nproj > kFastMaxProjections) return "takes 1-16 projections";
  if (!aligned16(p.x_codes) || p.x_stride % 16 != 0) return "needs 16-byte aligned activation rows";
  for (int i = 0; i < p.nproj; ++i) {
    const FastProjection& pr = p.proj[i];
    if (pr.out <= 0 || !pr.w8 || !pr.w_scales || (!pr.y && !pr.y_f32)) return "a projection lacks weight, scales or output";
    if (!aligned16(pr.w8) || pr.x_offset % 16 != 0 || (reinterpret_cast<uintptr_t>(pr.w_scales) & 3u))
      return "needs 16-byte aligned weights and input offsets";
    if (pr.w_scale_ld < p.in / 128) return "weight scale rows shorter than in / 128";
  }
  if (row_blocks(p) * kMaxSplits > (int64_t(1) << 30)) return "too many rows";
  return {};
}

}  // namespace

StreamGemvConfig stream_gemv_default(const DeviceContext& ctx, const FastGemvParams& p) {
  // From the per-SM balance: at least ~1.75 CTAs per SM (the grid is one wave of two CTAs per SM), at
  // least 2 chunks per warp, and a K split whose activations leave two CTAs per SM room.
  const int N = columns(p.tokens);
  const int64_t nC = p.in / 128, R = row_blocks(p);
  StreamGemvConfig c;
  c.stages = 4;
  int s = 1;
  auto can_split = [&](int next) { return next <= kMaxSplits && nC % next == 0; };
  while (smem_bytes(N, nC / s, c.stages) > kTwoPerSm && can_split(2 * s)) s *= 2;
  while (R * s * 4 < int64_t(ctx.sm_count()) * 7 && can_split(2 * s) && nC / (2 * s) >= 2) s *= 2;
  c.splits = s;
  return c;
}

bool stream_gemv_supports(const DeviceContext& ctx, const FastGemvParams& p) {
  if (!unsupported(p).empty()) return false;
  const StreamGemvConfig c = stream_gemv_default(ctx, p);
  if (size_t(smem_bytes(columns(p.tokens), p.in / 128 / c.splits, c.stages)) > ctx.max_smem_per_block()) return false;
  // Where it measured faster than the register kernel (bench_cuda_ops --stream, H100, 2026-12-06): launches
  // of >= 24 MiB of weights whose rows alone fill the grid, no K split (wq_b [32768, 1024]: 13.7 / 14.6 /
  // 16.4 us against 15.9 / 16.0 / 20.6 at 1 / 8 / 16 tokens). With a K split (wo_b [4096, 8192]: 21 us
  // against 16 at 1-8 tokens) and on smaller weights (wq_a + wkv, the shared expert: the launch and the
  // CTAs' start dominate) the register kernel's short CTAs do better.
  int64_t bytes = 0;
  for (int i = 0; i < p.nproj; ++i) bytes += int64_t(p.proj[i].out) * p.in;
  return bytes >= (int64_t(24) << 20) && c.splits == 1;
}

void stream_gemv_config(const DeviceContext& ctx, const FastGemvParams& p, const StreamGemvConfig& cfg) {
  const std::string why = unsupported(p);
  if (!why.empty()) fail("stream_gemv: ", why);
  const int64_t nC = p.in / 128;
  const int s = cfg.splits;
  if (s < 1 || s > kMaxSplits || (s & (s - 1)) != 0 || nC % s != 0)
    fail("stream_gemv: splits = ", s, " (a power of two <= ", kMaxSplits, " dividing in / 128 = ", nC, ")");
  if (cfg.stages != 4 && cfg.stages != 8) fail("stream_gemv: stages = ", cfg.stages, " (4 or 8)");
  const int N = columns(p.tokens);
  const int64_t nCu = nC / s;
  if (size_t(smem_bytes(N, nCu, cfg.stages)) > ctx.max_smem_per_block())
    fail("stream_gemv: in = ", p.in, " over ", s, " splits at ", N, " token columns and ", cfg.stages,
         " stages needs more shared memory than a block has");
  Args a;
  a.p = p;
  a.splits = s;
  int64_t blocks = 0;
  for (int i = 0; i < p.nproj; ++i) {
    a.block0[i] = int(blocks);
    blocks += ceil_div(p.proj[i].out, kRows);
  }
  a.block0[p.nproj] = int(blocks);
  const bool deep = cfg.stages == 8;
  if (N == 8) deep ? launch<8, 8>(ctx, a, nCu) : launch<8, 4>(ctx, a, nCu);
  else if (N == 16) deep ? launch<16, 8>(ctx, a, nCu) : launch<16, 4>(ctx, a, nCu);
  else deep ? launch<32, 8>(ctx, a, nCu) : launch<32, 4>(ctx, a, nCu);
}

void stream_gemv(const DeviceContext& ctx, const FastGemvParams& p) {
  stream_gemv_config(ctx, p, stream_gemv_default(ctx, p));
}

}  // namespace dsv4::cuda
