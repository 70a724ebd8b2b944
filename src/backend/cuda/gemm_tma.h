// The fast tier's bf16 linear with fp32 out for many output rows and few tokens (issue 14: the head,
// [129280, 4096], at 1-64 rows; linear_choice.h): y[T, out] = x[T, in] . W[out, in]^T, bf16 operands as stored (row-major,
// K contiguous), fp32 products and accumulation, fp32 out.
//
// Why: fast_gemv's CUDA-core kernel streams the 1.06 GB head at 89-92% of 4.26 TB/s at 1-8 rows and 76%
// at 16; this kernel at 100% (248 us) at 1 row, 98-96% at 16-64 (H200, 2026-12-06; cuBLASLt's autotuned
// plans tie it at 17-64 rows and win at 128: 282 against 320 us). At 128
// rows the head is nearly balanced (bytes 249 us at 4.26 TB/s, MMAs 171 us at 790 TFLOP/s), so the
// weight stream and the tensor cores must run at once.
// Shape ("swap AB": the weight is wgmma's A, M = output rows; the tokens are B, N = 16-128 columns): a
// persistent grid, one CTA per SM of three warpgroups: a producer warp issues TMA loads (128-byte swizzle)
// of a block of `block_rows` (128 or 256) weight rows x 64 k and the token tile's 64 k into a ring of
// `stages` shared-memory slots (mbarrier handshakes), and two consumer warpgroups run wgmma.m64nNk16 on
// them, each over half of the block's rows, into fp32 accumulators; a block's sums are stored while the
// producer already fetches the next block's slots. Tokens past N run as further token tiles of the same
// grid (each reads the weight again, from L2 where the CTAs of one weight block run together).
//
// Numerics (the fast tier's): bf16 products are exact in fp32; the tensor cores add them in fp32 in their
// own order. CPU twin: cpu::matmul within the bf16 GEMMs' tolerance and, per element, the bound of fp32 sums in any
// order (tests/backend/cuda/test_gemm_tma.cpp).
#pragma once
#include <cuda_bf16.h>

#include <cstdint>

#include "backend/cuda/context.h"

namespace dsv4::cuda {

struct GemmTmaParams {
  const __nv_bfloat16* x = nullptr;  // [tokens, in], rows x_stride elements apart
  const __nv_bfloat16* w = nullptr;  // [out, in], row-major
  float* y = nullptr;                // [tokens, out], rows y_stride elements apart
  int64_t tokens = 0, in = 0, out = 0;
  int64_t x_stride = 0, y_stride = 0;  // 0: in, out
};

// Kernel configuration, for tuning and tests (every one computes the same kind of sum; the bits depend
// on none of it but the tensor cores' order inside a 16-k step, which is fixed).
struct GemmTmaConfig {
  int block_rows = 0;  // weight rows per block: 128 or 256; 0: chosen
  int stages = 0;      // ring slots of 64 k: 2 .. what shared memory holds; 0: as many as fit
};

// Why a call is not gemm_tma's (empty: it is): it needs the driver's tensor-map encoder, 1 <= tokens,
// in % 64 == 0, 16-byte aligned x and w with x_stride % 8 == 0, and sizes TMA can address (< 2^31).
const char* gemm_tma_unsupported(const DeviceContext& ctx, const GemmTmaParams& p);
GemmTmaConfig gemm_tma_default(const DeviceContext& ctx, const GemmTmaParams& p);
void gemm_tma(const DeviceContext& ctx, const GemmTmaParams& p);
// Throws dsv4::Error where the call or the configuration breaks the contract above.
void gemm_tma_config(const DeviceContext& ctx, const GemmTmaParams& p, const GemmTmaConfig& cfg);

}  // namespace dsv4::cuda
