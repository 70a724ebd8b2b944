// An MTP block's input on the GPU (MODEL.md §8), official numerics, as the CPU backend's mtp_input
// (its twin) computes it:
//
//   e  = bf16(enorm(embed[next id]))           rms_norm of the embedding row
//   ep = bf16(e_proj . e)                      the official linear (FP8: x act-quantized 1x128)
//   h  = bf16(hnorm(S[t, j]))                  per stream; S the main model's last-block streams
//   hp = bf16(h_proj . h)                      over the T*n stream rows
//   X[t, j] = bf16(ep[t] + hp[t, j])           fp32 sum, one rounding
//
// with the kernels of the main layers: embed_gather (one stream), rms_norm, run_linear (the table's
// LinearSite::Projection kernel, so exact_linear in the exact tier) and mhc_post with post = 1 and
// comb = I for the sum (1·ep + hp_j + 0·hp_i: exact products, the zeros add nothing, so the fp32 sum
// is ep + hp_j rounded once as the CPU's; only a sum that is exactly zero may differ in its sign).
// The block itself then runs as forward layer num_layers + k through the main layers' ops.
#pragma once
#include <cuda_bf16.h>

#include <cstdint>

#include "backend/cuda/attention_sublayer.h"
#include "backend/cuda/buffer.h"
#include "backend/cuda/context.h"
#include "backend/cuda/device_weights.h"
#include "core/tensor.h"
#include "io/config.h"

namespace dsv4::cuda {

using bf16 = __nv_bfloat16;

// The MTP input's buffers for calls of up to `max_tokens` tokens (made only when the model has an
// MTP block), and the pinned staging of set_streams.
class MtpWorkspace {
 public:
  MtpWorkspace(const ModelConfig& cfg, int64_t max_tokens);
  ~MtpWorkspace();
  MtpWorkspace(const MtpWorkspace&) = delete;
  MtpWorkspace& operator=(const MtpWorkspace&) = delete;

  // S [T, n, D] fp32 (the main model's streams: bf16 values on the official path) to the device as
  // bf16, asynchronously on ctx's stream (waits first for the work that may still read the buffers).
  void set_streams(const DeviceContext& ctx, const Tensor& S);
  int64_t streams_tokens() const { return tokens_; }  // T of the last set_streams (0: none)

  int64_t max_tokens = 0, n = 0, D = 0;
  DeviceBuffer<bf16> S;            // [T*n, D] the uploaded streams, hnorm'd in place by mtp_input_forward
  DeviceBuffer<bf16> e;            // [T, D] enorm(embed rows)
  DeviceBuffer<bf16> ep;           // [round16(T), D] e_proj (cuBLASLt's padded rows)
  DeviceBuffer<bf16> hp;           // [T*n + 16, D] h_proj (the last piece's padded rows)
  DeviceBuffer<float> ones, eye;   // [T, n] = 1, [T, n, n] = I: mhc_post's post and comb for the sum

 private:
  uint16_t* host_ = nullptr;       // pinned [T*n*D] bf16 bits
  int64_t tokens_ = 0;
};

// X [T, n, D] = MTP block m's input for the tokens `ids` (device [T], the ids that follow the streams'
// positions) and the streams in mws.S (set_streams of the same T). h_proj runs over the T*n stream
// rows in pieces of at most min(aws.max_tokens(), kExactLinearMaxTokens) rows (each row's linear is
// independent of the others).
void mtp_input_forward(const DeviceContext& ctx, const DevMtpWeights& m, const DevEmbedWeights& embed,
                       MtpWorkspace& mws, AttentionWorkspace& aws, const int32_t* ids, int64_t T, float eps, bf16* X);

// The cuBLASLt plans mtp_input_forward takes for T tokens (call before capturing a graph).
void mtp_input_prepare(const DeviceContext& ctx, const DevMtpWeights& m, AttentionWorkspace& aws, int64_t T, int n);

}  // namespace dsv4::cuda
