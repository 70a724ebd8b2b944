// Dense linears on the GPU through cuBLASLt (MODEL.md §6): y[T, out] = x[T, in] . W[out, in]^T.
//
// * bf16 x bf16 -> bf16 or fp32, fp32 accumulate (wo_a; compressor and indexer weights_proj above
//   kExactLinearMaxTokens tokens, through linear_f32).
// * FP8 block-scaled (DeepSeek's "official" linears): x as e4m3 codes with one fp32 power-of-two scale
//   per 1 x 128 block of a row (CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F), W as e4m3 codes with one fp32
//   scale per 128 x 128 tile (CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F); bf16 out. The checkpoint's
//   E8M0 scales become fp32 on upload (exact).
//
// cuBLASLt is column-major: we compute D[out, T] (column-major) = W (op T) . X^T, which is row-major
// y[T, out]; both operands then have K contiguous (the "TN" layout FP8 requires on Hopper).
// A LtMatmul is planned once per shape (descriptors + heuristic algorithm) and run many times.
#pragma once
#include <cublasLt.h>
#include <cuda_bf16.h>

#include <cstdint>
#include <tuple>

#include "backend/cuda/buffer.h"
#include "backend/cuda/context.h"
#include "core/tensor.h"

namespace dsv4::cuda {

using bf16 = __nv_bfloat16;

// An FP8 linear weight in device memory.
struct Fp8Weight {
  DeviceBuffer<uint8_t> codes;  // [out, in] e4m3, row-major, exactly as stored in the checkpoint
  DeviceBuffer<float> scales;   // [ceil(out/128), scale_ld] fp32: cuBLASLt's BLK128x128 layout
  int64_t out = 0, in = 0;
  int64_t scale_ld = 0;         // round_up(ceil(in/128), 4): cuBLASLt pads the K blocks to 4
};
// Copies a checkpoint FP8 weight (e4m3 [out, in] + scale [ceil(out/128), ceil(in/128)] as E8M0 or F32)
// to the device. Checks dtypes and shapes; `in` must be a multiple of 16 (cuBLASLt alignment).
Fp8Weight upload_fp8_weight(const TensorView& weight, const TensorView& scale);

// Scales of an FP8 GEMM input in cuBLASLt's VEC128 layout: block b of row t at b * rows + t, where
// rows is the plan's padded_tokens().
inline int64_t act_scale_index(int64_t row, int64_t block, int64_t rows) { return block * rows + row; }

enum class GemmKind { Bf16, Bf16F32Out, Fp8BlockScaled };  // Bf16F32Out: bf16 operands, fp32 y

inline constexpr int kLtCandidates = 8;  // heuristic results an autotuned plan tries

// Several products of one shape in one launch (cuBLASLt's strided batch; bf16 plans only): product g
// reads x + g * x_offset with its rows x_ld elements apart, w + g * w_offset, and writes y + g * y_offset
// with its rows y_ld elements apart. The grouped wo_a: the heads of group g (a column slice of the
// attention output) through rows g * out .. of the weight into a column slice of z, with no copies.
struct LtGroups {
  int64_t count = 1;
  int64_t x_ld = 0, x_offset = 0;  // x_ld 0: in (contiguous rows)
  int64_t w_offset = 0;
  int64_t y_ld = 0, y_offset = 0;  // y_ld 0: out
  bool operator<(const LtGroups& o) const {
    return std::tie(count, x_ld, x_offset, w_offset, y_ld, y_offset) <
           std::tie(o.count, o.x_ld, o.x_offset, o.w_offset, o.y_ld, o.y_offset);
  }
};

class LtMatmul {
 public:
  // Plans y[tokens, out] = x[tokens, in] . W^T. Throws dsv4::Error (naming the shape) when cuBLASLt
  // has no algorithm for it. cuBLASLt's FP8 block-scaled kernels reject some token counts (1, 3, 17
  // on CUDA 13.0 / H200, while 64 and 200 work): the plan then rounds the token count up to the next
  // multiple of 4, 8 or 16 that it accepts, see padded_tokens().
  // With `groups` (count > 1), run_bf16 / run_bf16_f32 compute count products per call (LtGroups).
  LtMatmul(const DeviceContext& ctx, GemmKind kind, int64_t out, int64_t in, int64_t tokens, const LtGroups& groups = {});
  ~LtMatmul();
  LtMatmul(const LtMatmul&) = delete;
  LtMatmul& operator=(const LtMatmul&) = delete;

  // x [tokens, in] bf16, w [out, in] bf16, y [tokens, out] bf16 (row-major, contiguous).
  void run_bf16(const DeviceContext& ctx, const bf16* x, const bf16* w, bf16* y);
  // The same with fp32 y (a Bf16F32Out plan).
  void run_bf16_f32(const DeviceContext& ctx, const bf16* x, const bf16* w, float* y);
  // x_codes [P, in] e4m3; x_scales fp32 [ceil(in/128), P] (act_scale_index); y [P, out], with
  // P = padded_tokens(): rows past `tokens` are computed from whatever the buffers hold and are to be
  // ignored (keep them finite, e.g. zeroed once, to keep NaNs out of debugging).
  void run_fp8(const DeviceContext& ctx, const uint8_t* x_codes, const float* x_scales, const Fp8Weight& w, bf16* y);
  // As run_fp8 with the weight given as raw device pointers (benchmarks rotate through copies).
  void run_fp8_raw(const DeviceContext& ctx, const uint8_t* x_codes, const float* x_scales, const uint8_t* w_codes,
                   const float* w_scales, bf16* y);

  // bf16 plans: times each of cuBLASLt's heuristic candidates (up to kLtCandidates) on these operands
  // (shapes as run_bf16 / run_bf16_f32; y is overwritten) and keeps the fastest; returns its rank in the
  // heuristic's list (0: its first choice stands). On the context's stream, synchronizing; not during a
  // graph capture. The head's plans take it (H200, 2026-12-06: 292 -> 282 us at 128 rows, 270 -> 258 at 32).
  int autotune_bf16(const DeviceContext& ctx, const bf16* x, const bf16* w, void* y);

  GemmKind kind() const { return kind_; }
  int64_t out() const { return out_; }
  int64_t in() const { return in_; }
  int64_t tokens() const { return tokens_; }
  int64_t padded_tokens() const { return padded_; }

 private:
  void run(const DeviceContext& ctx, const void* a, const void* b, void* d);  // with algo_
  void run_algo(const DeviceContext& ctx, const void* a, const void* b, void* d, const cublasLtMatmulAlgo_t& algo);
  void release();
  GemmKind kind_;
  bool plan(const DeviceContext& ctx, int64_t n);  // false when cuBLASLt has no algorithm for n tokens
  int64_t out_, in_, tokens_, padded_;
  LtGroups groups_;
  cublasLtMatmulDesc_t desc_ = nullptr;
  cublasLtMatrixLayout_t a_ = nullptr, b_ = nullptr, d_ = nullptr;
  cublasLtMatmulAlgo_t algo_{};
  cublasLtMatmulAlgo_t candidates_[kLtCandidates]{};  // the heuristic's list, best first
  int n_candidates_ = 0;
};

}  // namespace dsv4::cuda
