// cuBLASLt planning and launch for the dense linears (contract in gemm.h).
#include <cuda_fp8.h>

#include <vector>

#include "backend/cuda/check.h"
#include "backend/cuda/gemm.h"
#include "backend/cuda/kernel_util.cuh"
#include "core/dtype.h"

namespace dsv4::cuda {

Fp8Weight upload_fp8_weight(const TensorView& weight, const TensorView& scale) {
  if (weight.dtype != DType::F8_E4M3 || weight.shape.size() != 2)
    fail("upload_fp8_weight: weight must be F8_E4M3 [out, in], got ", dtype_name(weight.dtype), " ",
         shape_str(weight.shape));
  Fp8Weight w;
  w.out = weight.dim(0);
  w.in = weight.dim(1);
  if (w.in % 16 != 0) fail("upload_fp8_weight: in = ", w.in, " must be a multiple of 16 (cuBLASLt alignment)");
  const int64_t ob = ceil_div(w.out, 128), kb = ceil_div(w.in, 128);
  if (scale.shape != Shape{ob, kb})
    fail("upload_fp8_weight: scale shape ", shape_str(scale.shape), ", expected ", shape_str(Shape{ob, kb}));
  if (scale.dtype != DType::F8_E8M0 && scale.dtype != DType::F32)
    fail("upload_fp8_weight: scale dtype ", dtype_name(scale.dtype), ", expected F8_E8M0 or F32");
  w.scale_ld = (kb + 3) / 4 * 4;
  std::vector<float> sf(size_t(ob * w.scale_ld), 0.0f);
  for (int64_t r = 0; r < ob; ++r) to_f32(scale.dtype, scale.data, size_t(r * kb), size_t(kb), &sf[size_t(r * w.scale_ld)]);
  w.codes = DeviceBuffer<uint8_t>(size_t(w.out * w.in));
  w.codes.upload(weight.data, size_t(w.out * w.in));
  w.scales = DeviceBuffer<float>(sf);
  return w;
}

LtMatmul::LtMatmul(const DeviceContext& ctx, GemmKind kind, int64_t out, int64_t in, int64_t tokens,
                   const LtGroups& groups)
    : kind_(kind), out_(out), in_(in), tokens_(tokens), padded_(tokens), groups_(groups) {
  if (out <= 0 || in <= 0 || tokens <= 0) fail("LtMatmul: empty shape ", out, "x", in, " x ", tokens, " tokens");
  if (in % 16 != 0) fail("LtMatmul: in = ", in, " must be a multiple of 16");
  if (groups.count < 1) fail("LtMatmul: ", groups.count, " groups");
  if (groups.count > 1 && kind == GemmKind::Fp8BlockScaled) fail("LtMatmul: groups take bf16 plans only");
  if (groups_.x_ld == 0) groups_.x_ld = in;
  if (groups_.y_ld == 0) groups_.y_ld = out;
  if (groups_.x_ld < in || groups_.y_ld < out)
    fail("LtMatmul: row strides x ", groups_.x_ld, ", y ", groups_.y_ld, " below the rows' ", in, ", ", out);
  narrow_int(out * in, "LtMatmul weight elements");
  try {
    for (int64_t align : {1, 4, 8, 16}) {
      padded_ = (tokens + align - 1) / align * align;
      if ((align == 1 || padded_ != tokens) && plan(ctx, padded_)) return;
      if (kind != GemmKind::Fp8BlockScaled) break;  // padding is an FP8 workaround only
    }
  } catch (...) {
    release();  // the destructor does not run for a constructor that throws
    throw;
  }
  release();
  fail("LtMatmul: cuBLASLt has no ", kind == GemmKind::Fp8BlockScaled ? "FP8 block-scaled" : "bf16",
       " algorithm for out ", out, ", in ", in, ", tokens ", tokens, " (also tried padding the tokens to 4, 8, 16)");
}

bool LtMatmul::plan(const DeviceContext& ctx, int64_t n) {
  release();
  const bool fp8 = kind_ == GemmKind::Fp8BlockScaled;
  const cudaDataType_t ab_type = fp8 ? CUDA_R_8F_E4M3 : CUDA_R_16BF;
  DSV4_CUBLAS_CHECK(cublasLtMatmulDescCreate(&desc_, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
  DSV4_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc_, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
  DSV4_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc_, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb));
  if (fp8) {
    // A = weights: one fp32 scale per 128 x 128 tile; B = activations: one per 1 x 128 block.
    const int32_t a_mode = CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F;
    const int32_t b_mode = CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F;
    DSV4_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc_, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, &a_mode, sizeof a_mode));
    DSV4_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc_, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, &b_mode, sizeof b_mode));
    // Placeholder scale pointers for the heuristic query (run_fp8 sets the real ones): some cuBLASLt
    // versions reject a scaled layout whose scale pointer is null.
    const void* placeholder = ctx.workspace();
    DSV4_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc_, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &placeholder, sizeof placeholder));
    DSV4_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc_, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &placeholder, sizeof placeholder));
  }
  // A: W stored [out, in] row-major = column-major [in, out] with ld = in, used transposed.
  DSV4_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&a_, ab_type, uint64_t(in_), uint64_t(out_), in_));
  // B: X stored [n, in] row-major (rows x_ld apart) = column-major [in, n], ld = x_ld.
  DSV4_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&b_, ab_type, uint64_t(in_), uint64_t(n), groups_.x_ld));
  // D: column-major [out, n], ld = y_ld = row-major y[n, out] (rows y_ld apart).
  const cudaDataType_t d_type = kind_ == GemmKind::Bf16F32Out ? CUDA_R_32F : CUDA_R_16BF;
  DSV4_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&d_, d_type, uint64_t(out_), uint64_t(n), groups_.y_ld));
  if (groups_.count > 1) {
    const int32_t count = int32_t(narrow_int(groups_.count, "LtMatmul groups"));
    auto batch = [&](cublasLtMatrixLayout_t l, int64_t offset) {
      DSV4_CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count, sizeof count));
      DSV4_CUBLAS_CHECK(
          cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &offset, sizeof offset));
    };
    batch(a_, groups_.w_offset);
    batch(b_, groups_.x_offset);
    batch(d_, groups_.y_offset);
  }

  cublasLtMatmulPreference_t pref = nullptr;
  DSV4_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
  const size_t ws = ctx.workspace_bytes();
  cublasLtMatmulHeuristicResult_t results[kLtCandidates]{};
  int found = 0;
  cublasStatus_t st = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws);
  if (st == CUBLAS_STATUS_SUCCESS)
    st = cublasLtMatmulAlgoGetHeuristic(ctx.lt(), desc_, a_, b_, d_, d_, pref, kLtCandidates, results, &found);
  cublasLtMatmulPreferenceDestroy(pref);
  if (st == CUBLAS_STATUS_NOT_SUPPORTED || (st == CUBLAS_STATUS_SUCCESS && found == 0)) return false;
  DSV4_CUBLAS_CHECK(st);
  n_candidates_ = 0;
  for (int i = 0; i < found; ++i)
    if (results[i].state == CUBLAS_STATUS_SUCCESS) candidates_[n_candidates_++] = results[i].algo;
  if (n_candidates_ == 0) return false;
  algo_ = candidates_[0];
  return true;
}

LtMatmul::~LtMatmul() { release(); }

void LtMatmul::release() {
  if (d_) cublasLtMatrixLayoutDestroy(d_);
  if (b_) cublasLtMatrixLayoutDestroy(b_);
  if (a_) cublasLtMatrixLayoutDestroy(a_);
  if (desc_) cublasLtMatmulDescDestroy(desc_);
  d_ = b_ = a_ = nullptr;
  desc_ = nullptr;
}

void LtMatmul::run(const DeviceContext& ctx, const void* a, const void* b, void* d) { run_algo(ctx, a, b, d, algo_); }

void LtMatmul::run_algo(const DeviceContext& ctx, const void* a, const void* b, void* d,
                        const cublasLtMatmulAlgo_t& algo) {
  const float alpha = 1.0f, beta = 0.0f;
  DSV4_CUBLAS_CHECK(cublasLtMatmul(ctx.lt(), desc_, &alpha, a, a_, b, b_, &beta, d, d_, d, d_, &algo, ctx.workspace(),
                                   ctx.workspace_bytes(), ctx.stream()));
}

void LtMatmul::run_bf16(const DeviceContext& ctx, const bf16* x, const bf16* w, bf16* y) {
  if (kind_ != GemmKind::Bf16) fail("LtMatmul::run_bf16 on a plan of another kind");
  run(ctx, w, x, y);
}

void LtMatmul::run_bf16_f32(const DeviceContext& ctx, const bf16* x, const bf16* w, float* y) {
  if (kind_ != GemmKind::Bf16F32Out) fail("LtMatmul::run_bf16_f32 on a plan of another kind");
  run(ctx, w, x, y);
}

int LtMatmul::autotune_bf16(const DeviceContext& ctx, const bf16* x, const bf16* w, void* y) {
  if (kind_ == GemmKind::Fp8BlockScaled) fail("LtMatmul::autotune_bf16 on an FP8 plan");
  cudaStreamCaptureStatus capturing = cudaStreamCaptureStatusNone;
  DSV4_CUDA_CHECK(cudaStreamIsCapturing(ctx.stream(), &capturing));
  if (capturing != cudaStreamCaptureStatusNone) fail("LtMatmul::autotune_bf16 inside a graph capture");
  if (n_candidates_ < 2) return 0;
  cudaEvent_t a, b;
  DSV4_CUDA_CHECK(cudaEventCreate(&a));
  DSV4_CUDA_CHECK(cudaEventCreate(&b));
  float best = 0.0f;
  int best_i = 0;
  for (int i = 0; i < n_candidates_; ++i) {
    float ms = 0.0f;
    for (int r = 0; r < 4; ++r) {  // a warm-up run, then the sum of three
      if (r == 1) DSV4_CUDA_CHECK(cudaEventRecord(a, ctx.stream()));
      run_algo(ctx, w, x, y, candidates_[i]);
    }
    DSV4_CUDA_CHECK(cudaEventRecord(b, ctx.stream()));
    DSV4_CUDA_CHECK(cudaEventSynchronize(b));
    DSV4_CUDA_CHECK(cudaEventElapsedTime(&ms, a, b));
    if (i == 0 || ms < best) best = ms, best_i = i;
  }
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  algo_ = candidates_[best_i];
  return best_i;
}

void LtMatmul::run_fp8_raw(const DeviceContext& ctx, const uint8_t* x_codes, const float* x_scales,
                           const uint8_t* w_codes, const float* w_scales, bf16* y) {
  if (kind_ != GemmKind::Fp8BlockScaled) fail("LtMatmul::run_fp8 on a bf16 plan");
  // The scale pointers live in the descriptor; setting them is a host-side write (no device work).
  DSV4_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc_, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &w_scales, sizeof w_scales));
  DSV4_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc_, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &x_scales, sizeof x_scales));
  run(ctx, w_codes, x_codes, y);
}

void LtMatmul::run_fp8(const DeviceContext& ctx, const uint8_t* x_codes, const float* x_scales, const Fp8Weight& w,
                       bf16* y) {
  if (w.out != out_ || w.in != in_)
    fail("LtMatmul::run_fp8: weight [", w.out, ", ", w.in, "] for a plan of [", out_, ", ", in_, "]");
  run_fp8_raw(ctx, x_codes, x_scales, w.codes.get(), w.scales.get(), y);
}

}  // namespace dsv4::cuda
