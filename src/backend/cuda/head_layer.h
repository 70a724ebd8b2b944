// The token embedding and the output head on the GPU (MODEL.md §2, §3): the embedding gather and
// hc_head collapse, final norm, fp32 logits. CPU twins: the CPU backend's embed and head.
#pragma once
#include <cuda_bf16.h>

#include <cstdint>

#include "backend/cuda/attention_sublayer.h"  // DevLeaves
#include "backend/cuda/buffer.h"
#include "backend/cuda/context.h"
#include "backend/cuda/gemm.h"
#include "backend/cuda/linear_choice.h"
#include "io/config.h"
#include "io/weights.h"

namespace dsv4::cuda {

using bf16 = __nv_bfloat16;

// ---- Embedding: X [T, n, D] bf16, every stream a copy of embed[id]. A view of the tree's embed.
struct DevEmbedWeights {
  int64_t vocab = 0, D = 0;
  const bf16* embed = nullptr;  // [V, D]
};
DevEmbedWeights embed_view(const DeviceBuffer<bf16>& embed, const ModelConfig& cfg);
// Ids outside [0, V) read row 0 (never out of bounds) and set *bad_id (device int32, optional) to 1.
void embed_forward(const DeviceContext& ctx, const DevEmbedWeights& w, const int32_t* token_ids, int64_t T, int n,
                   bf16* X, int32_t* bad_id = nullptr);

// ---- Head: hc_head collapse (sigmoid mixes, no Sinkhorn) -> bf16 -> final RMSNorm -> bf16 -> logits
// fp32 = h . head^T. A view of the tree's leaves: the main head's hc_head / norm / head, or an MTP
// block's hc_head / norm with the main head's weight (shared with the main model, MODEL.md §8).
struct DevHeadWeights {
  int64_t vocab = 0, D = 0;
  int n = 4;
  float eps = 1e-6f, hc_eps = 1e-6f;
  const float* hc_fn = nullptr;     // [n, n*D]
  const float* hc_base = nullptr;   // [n]
  const float* hc_scale = nullptr;  // [1]
  const float* norm = nullptr;      // [D]
  const bf16* head = nullptr;       // [V, D]
};
DevHeadWeights head_view(const HcT<DevLeaves>& hc, const DeviceBuffer<float>& norm, const DeviceBuffer<bf16>& head,
                         const ModelConfig& cfg);
// h [T, D] bf16 (workspace of the caller) = norm(collapse(X)); X [T, n, D]. Then logits [T, V] fp32.
void head_hidden_forward(const DeviceContext& ctx, const DevHeadWeights& w, const bf16* X, int64_t T, bf16* h);
// The logits through `kernel`, the table's choice (linear_choice.h, LinearSite::Head); `plan` ([vocab, D]
// x T Bf16F32Out, CudaBackend::head_plan) where it picks cuBLASLt.
void head_forward(const DeviceContext& ctx, const DevHeadWeights& w, const bf16* X, int64_t T, bf16* h,
                  float* logits, LinearKernel kernel, LtMatmul* plan = nullptr);

}  // namespace dsv4::cuda
