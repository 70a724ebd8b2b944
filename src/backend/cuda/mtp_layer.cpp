// The MTP block's input (mtp_layer.h).
#include "backend/cuda/mtp_layer.h"

#include <algorithm>
#include <vector>

#include "backend/cuda/check.h"
#include "backend/cuda/linear_choice.h"
#include "backend/cuda/ops.h"
#include "core/dtype.h"
#include "core/error.h"

namespace dsv4::cuda {
namespace {

int64_t round16(int64_t n) { return (n + 15) / 16 * 16; }

// h_proj's pieces: rows [r0, r0 + piece) of the T*n stream rows, at most what the attention workspace
// holds and at most kExactLinearMaxTokens (so the exact tier stays exact_linear, bit for bit the CPU's,
// for every call of up to kExactLinearMaxTokens tokens, as the main layers).
template <typename F>
void for_each_piece(const AttentionWorkspace& aws, int64_t rows, F&& f) {
  const int64_t most = std::min(aws.max_tokens(), kExactLinearMaxTokens);
  for (int64_t r0 = 0; r0 < rows; r0 += most) f(r0, std::min(most, rows - r0));
}

}  // namespace

MtpWorkspace::MtpWorkspace(const ModelConfig& cfg, int64_t max_tokens_)
    : max_tokens(max_tokens_), n(cfg.hc_mult), D(cfg.hidden_size) {
  if (max_tokens <= 0) fail("MtpWorkspace: max_tokens must be positive");
  const int64_t T = max_tokens;
  S = DeviceBuffer<bf16>(size_t(T * n * D));
  e = DeviceBuffer<bf16>(size_t(T * D));
  ep = DeviceBuffer<bf16>(size_t(round16(T) * D));
  hp = DeviceBuffer<bf16>(size_t((T * n + 16) * D));
  for (auto* b : {&S, &e, &ep, &hp}) b->fill_bytes(0);  // padded GEMM rows stay finite
  std::vector<float> one(size_t(T * n), 1.0f), id(size_t(T * n * n), 0.0f);
  for (int64_t t = 0; t < T; ++t)
    for (int64_t j = 0; j < n; ++j) id[size_t((t * n + j) * n + j)] = 1.0f;
  ones = DeviceBuffer<float>(one);
  eye = DeviceBuffer<float>(id);
  DSV4_CUDA_CHECK(cudaMallocHost(reinterpret_cast<void**>(&host_), size_t(T * n * D) * sizeof(uint16_t)));
}

MtpWorkspace::~MtpWorkspace() {
  if (host_) cudaFreeHost(host_);
}

void MtpWorkspace::set_streams(const DeviceContext& ctx, const Tensor& Sh) {
  if (Sh.shape.size() != 3 || Sh.shape[1] != n || Sh.shape[2] != D || Sh.shape[0] < 1 || Sh.shape[0] > max_tokens)
    fail("cuda backend: MTP input streams are ", shape_str(Sh.shape), ", expected [T, ", n, ", ", D,
         "] with T from 1 to ", max_tokens);
  // The previous call may still read S (and the pinned copy may still be in flight).
  ctx.synchronize();
  const size_t count = Sh.data.size();
  for (size_t i = 0; i < count; ++i) host_[i] = f32_to_bf16(Sh.data[i]);
  DSV4_CUDA_CHECK(cudaMemcpyAsync(S.get(), host_, count * sizeof(uint16_t), cudaMemcpyHostToDevice, ctx.stream()));
  tokens_ = Sh.shape[0];
}

void mtp_input_forward(const DeviceContext& ctx, const DevMtpWeights& m, const DevEmbedWeights& embed,
                       MtpWorkspace& mws, AttentionWorkspace& aws, const int32_t* ids, int64_t T, float eps, bf16* X) {
  const int64_t n = mws.n, D = mws.D;
  if (T < 1 || T > mws.max_tokens || T > aws.max_tokens()) fail("mtp input: ", T, " tokens exceed the workspace");
  if (mws.streams_tokens() != T)
    fail("cuda backend: MTP input streams of ", mws.streams_tokens(), " tokens for a call of ", T,
         " (set_streams before the MTP call)");
  // e = bf16(enorm(embed[id])); ep = e_proj(e).
  embed_forward(ctx, embed, ids, T, 1, mws.e.get());
  rms_norm_rows(ctx, mws.e.get(), m.enorm.get(), T, D, eps);
  run_linear(ctx, aws, m.e_proj, mws.e.get(), T, mws.ep.get());
  // h = bf16(hnorm(S)) per stream row; hp = h_proj(h) in pieces the attention workspace holds.
  rms_norm_rows(ctx, mws.S.get(), m.hnorm.get(), T * n, D, eps);
  for_each_piece(aws, T * n, [&](int64_t r0, int64_t rows) {
    run_linear(ctx, aws, m.h_proj, mws.S.get() + r0 * D, rows, mws.hp.get() + r0 * D);
  });
  // X[t, j] = bf16(1 * ep[t] + sum_i I[i][j] * hp[t, i]).
  mhc_post(ctx, {.X = mws.hp.get(), .y = mws.ep.get(), .post = mws.ones.get(), .comb = mws.eye.get(), .out = X,
                 .tokens = T, .n = int(n), .D = int(D)});
}

void mtp_input_prepare(const DeviceContext& ctx, const DevMtpWeights& m, AttentionWorkspace& aws, int64_t T, int n) {
  auto plan = [&](const DevLinear& l, int64_t rows) {
    if (linear_kernel(LinearSite::Projection, rows, ctx.kernels()) != LinearKernel::Lt) return;
    aws.plan(ctx, l.fp8 ? GemmKind::Fp8BlockScaled : GemmKind::Bf16, l.out, l.in, rows);
  };
  plan(m.e_proj, T);
  for_each_piece(aws, T * n, [&](int64_t, int64_t rows) { plan(m.h_proj, rows); });
}

}  // namespace dsv4::cuda
