// gemm_tma (contract and design in gemm_tma.h).
//
// Per CTA (384 threads: warpgroup 0 the producer, 1 and 2 the consumers; one CTA per SM, persistent):
//   shared memory = S slots of [ A: BM weight rows x 128 bytes | B: N token rows x 128 bytes ], each part
//   1,024-byte aligned and written by TMA in the 128-byte swizzle (the wgmma K-major SW128 operand), then
//   the barriers: full[S] (the producer's expect-tx arrival + the TMA bytes), empty[S] (one arrival per
//   consumer warpgroup once its MMAs on the slot are done).
//   Work item (tile) i = weight block i / token_tiles, token tile i % token_tiles: the CTAs running at
//   one time share weight blocks across token tiles (L2).
//   Consumer c (0, 1) owns rows c * BM / 2 .. of the block: MSUB = BM / 128 m64 tiles of N columns.
#include "backend/cuda/gemm_tma.h"

#include <algorithm>
#include <cstdint>

#include "backend/cuda/async_copy.cuh"
#include "backend/cuda/check.h"
#include "backend/cuda/kernel_util.cuh"
#include "backend/cuda/tensor_map.h"
#include "backend/cuda/wgmma.cuh"
#include "core/error.h"

namespace dsv4::cuda {
namespace {

constexpr int kThreads = 384;
constexpr int kK = 64;  // k per slot: one 128-byte swizzled row of bf16
constexpr int kMaxStages = 8;
constexpr int kProducerRegs = 40, kConsumerRegs = 232;

struct Args {
  CUtensorMap tw;  // W: {in, out}, box {64, BM}
  CUtensorMap tx;  // x: {in, tokens}, box {64, N}
  float* y;
  int64_t y_stride;
  int tokens, out, nk;  // nk = in / 64
  int token_tiles, tiles;
  int stages;
};

__host__ __device__ constexpr uint32_t slot_bytes(int BM, int N) { return uint32_t(BM + N) * 128u; }
// Dynamic shared memory: the slots, the barriers, and the slack to align the slots to 1,024 bytes.
__host__ __device__ constexpr size_t smem_bytes(int BM, int N, int S) {
  return size_t(S) * slot_bytes(BM, N) + size_t(2 * S) * 8 + 1024;
}

template <int MSUB, int N>
__global__ void __launch_bounds__(kThreads, 1) gemm_tma_kernel(const __grid_constant__ Args a) {
  static_assert(N == 16 || N == 32 || N == 64 || N == 128, "token columns: the wgmma N");
  static_assert(MSUB == 1 || MSUB == 2, "m64 tiles per consumer");
  constexpr int BM = 128 * MSUB;
  constexpr uint32_t kA = uint32_t(BM) * 128u, kSlot = slot_bytes(BM, N);
  extern __shared__ uint8_t smem_raw[];
  uint8_t* smem = smem_raw + ((1024u - (smem_u32(smem_raw) & 1023u)) & 1023u);
  const int S = a.stages;
  uint64_t* full = reinterpret_cast<uint64_t*>(smem + size_t(S) * kSlot);
  uint64_t* empty = full + S;
  const int wg = int(threadIdx.x) / 128, tid = int(threadIdx.x) % 128;
  const int nk = a.nk;

  if (threadIdx.x == 0) {
    for (int s = 0; s < S; ++s) {
      mbar_init(&full[s], 1);
      mbar_init(&empty[s], 2);
    }
    mbar_fence_init();
  }
  __syncthreads();
  allow_dependents();

  if (wg == 0) {
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" ::"n"(kProducerRegs));
    if (tid != 0 || int(blockIdx.x) >= a.tiles) return;
    // The weights are constant: the first tile's first slots fill before the wait for the kernel that
    // wrote x (a programmatic dependent launch); x's parts of them follow the wait.
    const int tile0 = int(blockIdx.x), pro = min(S, nk);
    for (int kb = 0; kb < pro; ++kb) {
      mbar_arrive_expect(&full[kb], kSlot);
      tma_load_2d(smem_u32(smem + size_t(kb) * kSlot), &a.tw, kb * kK, (tile0 / a.token_tiles) * BM, &full[kb]);
    }
    grid_dependency_wait();
    for (int kb = 0; kb < pro; ++kb)
      tma_load_2d(smem_u32(smem + size_t(kb) * kSlot + kA), &a.tx, kb * kK, (tile0 % a.token_tiles) * N, &full[kb]);
    int s = pro % S, kb = pro;
    uint32_t ph = pro == S ? 1u : 0u;
    for (int tile = tile0; tile < a.tiles; tile += int(gridDim.x), kb = 0) {
      const int r0 = (tile / a.token_tiles) * BM, c0 = (tile % a.token_tiles) * N;
      for (; kb < nk; ++kb) {
        mbar_wait(&empty[s], ph ^ 1u);
        uint8_t* slot = smem + size_t(s) * kSlot;
        mbar_arrive_expect(&full[s], kSlot);
        tma_load_2d(smem_u32(slot), &a.tw, kb * kK, r0, &full[s]);
        tma_load_2d(smem_u32(slot + kA), &a.tx, kb * kK, c0, &full[s]);
        if (++s == S) {
          s = 0;
          ph ^= 1u;
        }
      }
    }
    return;
  }

  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" ::"n"(kConsumerRegs));
  grid_dependency_wait();  // y may still be read by an earlier kernel until then
  const int c = wg - 1, warp = tid / 32, g = (tid % 32) / 4, t = tid % 4;
  float acc[MSUB][N / 2];
  int s = 0;
  uint32_t ph = 0;
  // Slot s's MMAs (4 k16 steps per m64 tile), committed as one group; the first k block writes acc.
  auto issue = [&](int kb) {
    mbar_wait(&full[s], ph);
    const uint8_t* A = smem + size_t(s) * kSlot + size_t(c) * MSUB * 64 * 128;
    const uint8_t* B = smem + size_t(s) * kSlot + kA;
    wgmma_fence();
#pragma unroll
    for (int m = 0; m < MSUB; ++m)
#pragma unroll
      for (int kk = 0; kk < 4; ++kk)
        wgmma_ss_bf16<N>(acc[m], smem_desc_sw128(A + m * 64 * 128 + kk * 32), smem_desc_sw128(B + kk * 32),
                         kb > 0 || kk > 0);
    wgmma_commit();
  };
  auto release = [&](int slot) {
    if (tid == 0) mbar_arrive(&empty[slot]);
  };
  auto advance = [&] {
    if (++s == S) {
      s = 0;
      ph ^= 1u;
    }
  };
  for (int tile = int(blockIdx.x); tile < a.tiles; tile += int(gridDim.x)) {
    // One slot's MMAs in flight while the next slot's are issued; the last k block outside the loop,
    // waiting to 0 in straight-line code before the stores read acc (docs/cuda.md: ptxas moved epilogue
    // reads above the final wait of a loop ending on wait_group 1).
    int prev = -1;
    for (int kb = 0; kb + 1 < nk; ++kb) {
      issue(kb);
      if (prev >= 0) {
        wgmma_wait<1>();
        release(prev);
      }
      prev = s;
      advance();
    }
    issue(nk - 1);
    wgmma_wait<0>();
    if (prev >= 0) release(prev);
    release(s);
    advance();
#pragma unroll
    for (int m = 0; m < MSUB; ++m)
#pragma unroll
      for (int j = 0; j < N / 2; ++j) fence_f32(acc[m][j]);

    const int r0 = (tile / a.token_tiles) * BM + c * MSUB * 64, c0 = (tile % a.token_tiles) * N;
#pragma unroll
    for (int m = 0; m < MSUB; ++m)
#pragma unroll
      for (int j = 0; j < N / 2; ++j) {
        const int row = r0 + m * 64 + warp * 16 + g + 8 * ((j >> 1) & 1);
        const int col = c0 + 8 * (j >> 2) + 2 * t + (j & 1);
        if (row < a.out && col < a.tokens) a.y[int64_t(col) * a.y_stride + row] = acc[m][j];
      }
  }
}

int columns(int64_t tokens) { return tokens <= 16 ? 16 : tokens <= 32 ? 32 : tokens <= 64 ? 64 : 128; }

template <int MSUB, int N>
void launch(const DeviceContext& ctx, const Args& a) {
  const auto kernel = gemm_tma_kernel<MSUB, N>;
  allow_max_dynamic_smem(ctx, kernel);
  const int grid = std::min(a.tiles, ctx.sm_count());
  launch_pdl(ctx, kernel, dim3(unsigned(grid)), dim3(kThreads), smem_bytes(128 * MSUB, N, a.stages), a);
}

template <int MSUB>
void launch_columns(const DeviceContext& ctx, const Args& a, int N) {
  if (N == 16) launch<MSUB, 16>(ctx, a);
  else if (N == 32) launch<MSUB, 32>(ctx, a);
  else if (N == 64) launch<MSUB, 64>(ctx, a);
  else launch<MSUB, 128>(ctx, a);
}

int max_stages(const DeviceContext& ctx, int BM, int N) {
  int s = kMaxStages;
  while (s > 2 && smem_bytes(BM, N, s) > ctx.max_smem_per_block()) --s;
  return s;
}

}  // namespace

const char* gemm_tma_unsupported(const DeviceContext& ctx, const GemmTmaParams& p) {
  if (!ctx.tensor_map_encoder()) return "needs the driver's cuTensorMapEncodeTiled";
  if (!p.x || !p.w || !p.y) return "needs x, w and y";
  if (p.tokens < 1 || p.out < 1 || p.in < kK) return "needs tokens >= 1, out >= 1, in >= 64";
  if (p.in % kK != 0) return "needs in % 64 == 0";
  const int64_t xs = p.x_stride ? p.x_stride : p.in, ys = p.y_stride ? p.y_stride : p.out;
  if (xs < p.in || ys < p.out) return "needs row strides >= the rows";
  if (!aligned16(p.x) || !aligned16(p.w) || xs % 8 != 0) return "needs 16-byte aligned x and w rows";
  if (p.out >= (int64_t(1) << 31) || p.tokens >= (int64_t(1) << 31) || p.in >= (int64_t(1) << 31))
    return "needs sizes below 2^31";
  return nullptr;
}

GemmTmaConfig gemm_tma_default(const DeviceContext& ctx, const GemmTmaParams& p) {
  GemmTmaConfig c;
  c.block_rows = 256;
  c.stages = max_stages(ctx, c.block_rows, columns(p.tokens));
  return c;
}

void gemm_tma_config(const DeviceContext& ctx, const GemmTmaParams& p, const GemmTmaConfig& cfg) {
  if (const char* why = gemm_tma_unsupported(ctx, p)) fail("gemm_tma: ", why);
  if (cfg.block_rows != 128 && cfg.block_rows != 256) fail("gemm_tma: block_rows = ", cfg.block_rows, " (128 or 256)");
  const int N = columns(p.tokens);
  const int most = max_stages(ctx, cfg.block_rows, N);
  if (cfg.stages < 2 || cfg.stages > most)
    fail("gemm_tma: stages = ", cfg.stages, " (2 .. ", most, " at ", cfg.block_rows, " rows x ", N, " columns)");
  const int64_t xs = p.x_stride ? p.x_stride : p.in, ys = p.y_stride ? p.y_stride : p.out;
  Args a{};
  a.tw = bf16_tensor_map_sw128(ctx, p.w, p.in, p.out, p.in, kK, cfg.block_rows, "gemm_tma", "the weight");
  a.tx = bf16_tensor_map_sw128(ctx, p.x, p.in, p.tokens, xs, kK, N, "gemm_tma", "the input");
  a.y = p.y;
  a.y_stride = ys;
  a.tokens = int(p.tokens);
  a.out = int(p.out);
  a.nk = int(p.in / kK);
  a.token_tiles = int(ceil_div(p.tokens, N));
  const int64_t tiles = ceil_div(p.out, cfg.block_rows) * a.token_tiles;
  a.tiles = narrow_int(tiles, "gemm_tma tiles");
  a.stages = cfg.stages;
  if (cfg.block_rows == 128) launch_columns<1>(ctx, a, N);
  else launch_columns<2>(ctx, a, N);
}

void gemm_tma(const DeviceContext& ctx, const GemmTmaParams& p) { gemm_tma_config(ctx, p, gemm_tma_default(ctx, p)); }

}  // namespace dsv4::cuda
