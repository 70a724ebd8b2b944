// Embedding, head collapse and the fp32-output matmul on the GPU (MODEL.md §2, §3). CPU twins: the
// embedding copy in Model::forward, cpu::mhc_head_coeffs + cpu::mhc_collapse (Model::head_hidden),
// cpu::matmul. Conventions as in ops.h.
#pragma once
#include <cuda_bf16.h>

#include <cstdint>

#include "backend/cuda/context.h"

namespace dsv4::cuda {

using bf16 = __nv_bfloat16;

// ---- Embedding gather: X[t, j] = table[id_t] for every stream j < n. Ids outside [0, vocab) read row
// 0 (never out of bounds) and set *bad = 1 when `bad` is given. Exact copy.
struct EmbedParams {
  const int32_t* ids = nullptr;  // [T]
  const bf16* table = nullptr;   // [vocab, D]
  bf16* X = nullptr;             // [T, n, D]
  int32_t* bad = nullptr;        // optional flag
  int64_t T = 0, vocab = 0;
  int n = 4, D = 0;              // D a multiple of 8
};
void embed_gather(const DeviceContext& ctx, const EmbedParams& p);

// ---- hc_head collapse: rho = rsqrt(mean(X^2) + eps) over the n*D values of a token, mix_j =
// rho * (fn_j . X), pre_j = sigmoid(scale * mix_j + base_j) + hc_eps, u = bf16(sum_j pre_j X_j).
// No Sinkhorn. One block per token.
struct HcHeadParams {
  const bf16* X = nullptr;       // [T, n, D]
  const float* fn = nullptr;     // [n, n*D]
  const float* base = nullptr;   // [n]
  const float* scale = nullptr;  // [1]
  bf16* u = nullptr;             // [T, D]
  int64_t T = 0;
  int n = 4, D = 0;              // n <= 8, D a multiple of 8
  float norm_eps = 1e-6f, hc_eps = 1e-6f;
};
void hc_head_collapse(const DeviceContext& ctx, const HcHeadParams& p);


}  // namespace dsv4::cuda
