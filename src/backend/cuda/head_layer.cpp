// The GPU embedding and head (contracts in head_layer.h).
#include "backend/cuda/head_layer.h"

#include "backend/cuda/attn_ops.h"
#include "backend/cuda/device_weights.h"
#include "backend/cuda/embed_head.h"
#include "backend/cuda/gemm_tma.h"
#include "backend/cuda/linear_choice.h"
#include "backend/cuda/ops.h"
#include "core/error.h"

namespace dsv4::cuda {

// ---- Embedding.
DevEmbedWeights embed_view(const DeviceBuffer<bf16>& embed, const ModelConfig& cfg) {
  return {.vocab = cfg.vocab_size, .D = cfg.hidden_size, .embed = embed.get()};
}

void embed_forward(const DeviceContext& ctx, const DevEmbedWeights& w, const int32_t* token_ids, int64_t T, int n,
                   bf16* X, int32_t* bad_id) {
  embed_gather(ctx, {.ids = token_ids, .table = w.embed, .X = X, .bad = bad_id, .T = T, .vocab = w.vocab, .n = n,
                     .D = int(w.D)});
}

// ---- Head.
DevHeadWeights head_view(const HcT<DevLeaves>& hc, const DeviceBuffer<float>& norm, const DeviceBuffer<bf16>& head,
                         const ModelConfig& cfg) {
  return {.vocab = cfg.vocab_size, .D = cfg.hidden_size, .n = int(cfg.hc_mult), .eps = float(cfg.rms_norm_eps),
          .hc_eps = float(cfg.hc_eps), .hc_fn = hc.fn.get(), .hc_base = hc.base.get(), .hc_scale = hc.scale.get(),
          .norm = norm.get(), .head = head.get()};
}

void head_hidden_forward(const DeviceContext& ctx, const DevHeadWeights& w, const bf16* X, int64_t T, bf16* h) {
  hc_head_collapse(ctx, {.X = X, .fn = w.hc_fn, .base = w.hc_base, .scale = w.hc_scale, .u = h,
                         .T = T, .n = w.n, .D = int(w.D), .norm_eps = w.eps, .hc_eps = w.hc_eps});
  rms_norm_rows(ctx, h, w.norm, T, w.D, w.eps);
}

void head_forward(const DeviceContext& ctx, const DevHeadWeights& w, const bf16* X, int64_t T, bf16* h,
                  float* logits, LinearKernel kernel, LtMatmul* plan) {
  head_hidden_forward(ctx, w, X, T, h);
  const int in = int(w.D), out = int(w.vocab);
  switch (kernel) {
    case LinearKernel::Exact:
    case LinearKernel::FastGemv:
      return run_linear_kernel(ctx, kernel, {.x = h, .x_stride = w.D, .w16 = w.head, .y_f32 = logits,
                                             .y_stride = out, .tokens = T, .out = out, .in = in});
    case LinearKernel::GemmTma:
      return gemm_tma(ctx, {.x = h, .w = w.head, .y = logits, .tokens = T, .in = in, .out = out, .x_stride = w.D});
    case LinearKernel::Lt:
      if (!plan) fail("head_forward: the cuBLASLt path without a plan");
      return linear_f32(ctx, {.x = h, .w = w.head, .y = logits, .tokens = T, .x_stride = w.D, .in = in,
                              .out = out, .plan = plan});
    case LinearKernel::Warp:  // linear_f32 without a plan above kExactLinearMaxTokens tokens
      if (T <= kExactLinearMaxTokens) fail("head_forward: the warp kernel runs above ", kExactLinearMaxTokens, " rows");
      return linear_f32(ctx, {.x = h, .w = w.head, .y = logits, .tokens = T, .x_stride = w.D, .in = in,
                              .out = out});
  }
}

}  // namespace dsv4::cuda
