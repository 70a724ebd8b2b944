// The GPU MoE, embedding and head (model_cuda/ffn_layer.h) against the CPU model's official numerics on
// the fixture models, and the batch-1 MoE time of one Flash-shaped layer with random weights.
#include <gtest/gtest.h>

#include <algorithm>
#include <limits>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <random>
#include <vector>

#include "backend/cpu/ops.h"
#include "backend/cuda/fill.h"
#include "core/dtype.h"
#include "model/model.h"
#include "model_cuda/ffn_layer.h"
#include "model_cuda/moe_prefill.h"
#include "support/test_paths.h"

namespace dsv4::cuda {
namespace {

#define REQUIRE_HOPPER_AND(fixture)                                                         \
  do {                                                                                      \
    if (!have_hopper_device()) GTEST_SKIP() << "no sm_90 CUDA device";                      \
    if (!std::filesystem::exists(test::fixture_dir(fixture))) GTEST_SKIP() << "no fixture"; \
  } while (0)

struct Diff {
  double max_abs = 0, rel_l2 = 0, cos_dist = 0;
};
Diff diff(const std::vector<float>& got, const std::vector<float>& ref) {
  Diff d;
  double num = 0, den = 0, dot = 0, gg = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    const double e = double(got[i]) - ref[i];
    d.max_abs = std::max(d.max_abs, std::abs(e));
    num += e * e;
    den += double(ref[i]) * ref[i];
    dot += double(got[i]) * ref[i];
    gg += double(got[i]) * got[i];
  }
  d.rel_l2 = std::sqrt(num / std::max(den, 1e-30));
  d.cos_dist = 1 - dot / std::sqrt(std::max(den * gg, 1e-30));
  return d;
}

std::vector<float> bf16_normal(std::mt19937_64& g, size_t n, float sigma) {
  std::normal_distribution<float> nd(0.0f, sigma);
  std::vector<float> v(n);
  for (float& x : v) x = round_bf16(nd(g));
  return v;
}
DeviceBuffer<bf16> to_device_bf16(const std::vector<float>& v) {
  std::vector<uint16_t> h(v.size());
  for (size_t i = 0; i < v.size(); ++i) h[i] = f32_to_bf16(v[i]);
  DeviceBuffer<bf16> d(v.size());
  DSV4_CUDA_CHECK(cudaMemcpy(d.get(), h.data(), h.size() * 2, cudaMemcpyHostToDevice));
  return d;
}
std::vector<float> from_device_bf16(const bf16* p, size_t n) {
  std::vector<uint16_t> h(n);
  DSV4_CUDA_CHECK(cudaMemcpy(h.data(), p, n * 2, cudaMemcpyDeviceToHost));
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = bf16_to_f32(h[i]);
  return v;
}

// Above kExactLinearMaxTokens FP4 experts take the grouped tensor-core pass (moe_prefill.h): the same
// products summed in another order, so bf16-level agreement instead of bit equality.
void check_moe(const std::string& fixture, const std::vector<int64_t>& Ts = {1, 5, 16}, bool grouped = false) {
  const std::string dir = test::fixture_dir(fixture) + "/model";
  auto model = Model::load(dir, Numerics::Official);
  const ModelConfig& cfg = model->config();
  auto ckpt = Checkpoint::open(dir);
  const Weights w = bind_weights(cfg, *ckpt);
  DeviceContext ctx;
  MoeWorkspace ws(ctx, cfg, *std::max_element(Ts.begin(), Ts.end()));
  ws.grouped_prefill = grouped;
  std::mt19937_64 g(7);
  const int64_t D = cfg.hidden_size;
  for (size_t layer = 0; layer < w.layers.size(); ++layer) {
    const DevMoeWeights dw = upload_moe_weights(ctx, w.layers[layer].ffn, cfg, cfg.layers[layer]);
    for (int64_t T : Ts) {
      std::vector<float> x = bf16_normal(g, size_t(T * D), 1.0f);
      std::vector<int32_t> tokens;
      for (int64_t t = 0; t < T; ++t) tokens.push_back(int32_t(g() % uint64_t(cfg.vocab_size)));
      Tensor xt({T, D});
      xt.data = x;
      const Tensor ref = model->moe_layer(layer, xt, tokens);
      DeviceBuffer<bf16> dx = to_device_bf16(x), dy(size_t(T * D));
      DeviceBuffer<int32_t> dtok(tokens);
      moe_forward(ctx, dw, ws, dx.get(), dtok.get(), T, dy.get());
      ctx.synchronize();
      const std::vector<float> got = from_device_bf16(dy.get(), size_t(T * D));
      const Diff d = diff(got, ref.data);
      std::printf("[moe %s layer %zu %s T=%lld] max|d| %.3g rel-L2 %.3g cos-dist %.3g\n", fixture.c_str(), layer,
                  cfg.layers[layer].route == RouteKind::Hash ? "hash" : "top-k", (long long)T, d.max_abs, d.rel_l2,
                  d.cos_dist);
      EXPECT_LT(d.rel_l2, 1e-2) << fixture << " layer " << layer << " T " << T;
      EXPECT_LT(d.cos_dist, 1e-4) << fixture << " layer " << layer << " T " << T;
    }
  }
  EXPECT_EQ(ws.bad.download()[0], 0);
}

TEST(FfnLayer, MoeMatchesCpuTinyQ) {
  REQUIRE_HOPPER_AND("tiny-q");
  check_moe("tiny-q");
}
TEST(FfnLayer, MoeMatchesCpuTinyShakespeareFp8) {
  REQUIRE_HOPPER_AND("tiny-shakespeare-fp8");
  check_moe("tiny-shakespeare-fp8");
}

TEST(FfnLayer, MoePrefillMatchesCpuTinyQ) {
  REQUIRE_HOPPER_AND("tiny-q");
  check_moe("tiny-q", {600, 2048}, true);
}
TEST(FfnLayer, MoePrefillMatchesCpuTinyShakespeareFp8) {
  REQUIRE_HOPPER_AND("tiny-shakespeare-fp8");
  check_moe("tiny-shakespeare-fp8", {600, 2048}, true);
}

TEST(FfnLayer, EmbedAndHeadMatchCpu) {
  REQUIRE_HOPPER_AND("tiny-q");
  const std::string dir = test::fixture_dir("tiny-q") + "/model";
  auto model = Model::load(dir, Numerics::Official);
  const ModelConfig& cfg = model->config();
  auto ckpt = Checkpoint::open(dir);
  const Weights w = bind_weights(cfg, *ckpt);
  DeviceContext ctx;
  const int64_t T = 5, D = cfg.hidden_size, V = cfg.vocab_size, n = cfg.hc_mult;

  const DevEmbedWeights de = upload_embed_weights(ctx, w, cfg);
  const std::vector<int32_t> ids = {0, 1, 7, int32_t(V - 1), 42};
  DeviceBuffer<int32_t> dids(ids), bad(std::vector<int32_t>{0});
  DeviceBuffer<bf16> X(size_t(T * n * D));
  embed_forward(ctx, de, dids.get(), T, int(n), X.get(), bad.get());
  ctx.synchronize();
  const Tensor table = to_tensor(w.embed);
  const std::vector<float> Xg = from_device_bf16(X.get(), size_t(T * n * D));
  for (int64_t t = 0; t < T; ++t)
    for (int64_t j = 0; j < n; ++j)
      for (int64_t c = 0; c < D; ++c)
        ASSERT_EQ(Xg[size_t((t * n + j) * D + c)], table.data[size_t(ids[size_t(t)] * D + c)]);
  EXPECT_EQ(bad.download()[0], 0);

  std::mt19937_64 g(9);
  const std::vector<float> xs = bf16_normal(g, size_t(T * n * D), 1.0f);
  Tensor Xt({T, n, D});
  Xt.data = xs;
  const Tensor h_ref = model->head_hidden_of(Xt);
  std::vector<float> logits_ref(size_t(T * V));
  const Tensor head = to_tensor(w.head.weight);
  cpu::matmul(h_ref.ptr(), T, D, head.ptr(), V, logits_ref.data());

  const DevHeadWeights dh = upload_head_weights(ctx, w.hc_head, w.norm, w.head, cfg);
  DeviceBuffer<bf16> dX = to_device_bf16(xs), h(size_t(T * D));
  DeviceBuffer<float> logits(size_t(T * V));
  head_forward(ctx, dh, dX.get(), T, h.get(), logits.get());
  ctx.synchronize();
  const Diff dhid = diff(from_device_bf16(h.get(), size_t(T * D)), h_ref.data);
  const Diff dlog = diff(logits.download(), logits_ref);
  std::printf("[head tiny-q T=%lld] hidden: max|d| %.3g rel-L2 %.3g; logits: max|d| %.3g rel-L2 %.3g\n", (long long)T,
              dhid.max_abs, dhid.rel_l2, dlog.max_abs, dlog.rel_l2);
  EXPECT_LT(dhid.rel_l2, 4e-3);
  EXPECT_LT(dlog.rel_l2, 4e-3);
}

// One Flash-shaped MoE layer: D 4096, I 2048, 256 experts, 6 active + the shared expert, random weights
// in the checkpoint formats.
ModelConfig flash_moe_config() {
  ModelConfig cfg;
  cfg.hidden_size = 4096;
  cfg.moe_inter_dim = 2048;
  cfg.n_routed_experts = 256;
  cfg.experts_per_tok = 6;
  cfg.n_shared_experts = 1;
  cfg.vocab_size = 129280;
  cfg.routed_scaling_factor = 1.5;
  cfg.swiglu_limit = 10.0;
  return cfg;
}
DevMoeWeights flash_moe_weights(const DeviceContext& ctx) {
  const int64_t E = 256, D = 4096, I = 2048, k = 6;
  DevMoeWeights w;
  w.E = E;
  w.k = k;
  w.D = D;
  w.I = I;
  w.vocab = 129280;
  w.swiglu_limit = 10.0f;
  w.routed_scaling = 1.5f;
  w.gate = DeviceBuffer<bf16>(size_t(E * D));
  fill_random_bf16(ctx, w.gate.get(), w.gate.size(), 1, 0.02f);
  w.bias = DeviceBuffer<float>(size_t(E));
  w.bias.fill_bytes(0);
  w.w13 = DeviceBuffer<uint8_t>(size_t(E * 2 * I * D / 2));
  w.w13_scales = DeviceBuffer<uint8_t>(size_t(E * 2 * I * D / 32));
  w.w2 = DeviceBuffer<uint8_t>(size_t(E * D * I / 2));
  w.w2_scales = DeviceBuffer<uint8_t>(size_t(E * D * I / 32));
  fill_random_bytes(ctx, w.w13.get(), w.w13.size(), 2);
  fill_random_bytes(ctx, w.w13_scales.get(), w.w13_scales.size(), 3, 118, 122);
  fill_random_bytes(ctx, w.w2.get(), w.w2.size(), 4);
  fill_random_bytes(ctx, w.w2_scales.get(), w.w2_scales.size(), 5, 118, 122);
  w.has_shared = true;
  auto fp8 = [&](Fp8Weight& f, int64_t out, int64_t in, uint64_t seed) {
    f.out = out;
    f.in = in;
    f.scale_ld = ((in + 127) / 128 + 3) / 4 * 4;
    f.codes = DeviceBuffer<uint8_t>(size_t(out * in));
    f.scales = DeviceBuffer<float>(size_t((out + 127) / 128 * f.scale_ld));
    fill_random_e4m3(ctx, f.codes.get(), f.codes.size(), seed);
    fill_random_pow2(ctx, f.scales.get(), f.scales.size(), seed + 1, -12, -8);
  };
  fp8(w.shared_w1, I, D, 10);
  fp8(w.shared_w3, I, D, 12);
  fp8(w.shared_w2, D, I, 14);
  return w;
}

// Batch-1 (and batch-8) MoE time of the Flash-shaped layer; CUDA-graph replays timed with events.
TEST(FfnLayer, FlashMoeTiming) {
  if (!have_hopper_device()) GTEST_SKIP() << "no sm_90 CUDA device";
  DeviceContext ctx;
  const ModelConfig cfg = flash_moe_config();
  const int64_t E = 256, D = 4096, I = 2048, k = 6;
  const DevMoeWeights w = flash_moe_weights(ctx);

  MoeWorkspace ws(ctx, cfg, 32);
  DeviceBuffer<bf16> x(size_t(32 * D)), y(size_t(32 * D)), y_graph(size_t(32 * D));
  fill_random_bf16(ctx, x.get(), x.size(), 20, 1.0f);
  std::vector<int32_t> toks(32);
  for (int i = 0; i < 32; ++i) toks[size_t(i)] = i + 1;
  DeviceBuffer<int32_t> tok(toks);
  std::vector<float> per_selection;  // the eager output of the per-(token, pick) path at this T
  for (const int64_t T : {1, 2, 4, 8, 16, 24, 32})
  for (const bool tiles : {false, true}) {  // one selection per (token, pick), then expert tiles
    if (tiles && T < 8) continue;
    ws.expert_tiles_from = tiles ? 1 : std::numeric_limits<int64_t>::max();
    ws.prepare(ctx, T);
    moe_forward(ctx, w, ws, x.get(), tok.get(), T, y.get());  // eager reference
    ctx.synchronize();
    if (!tiles) per_selection = from_device_bf16(y.get(), size_t(T * D));
    else EXPECT_EQ(from_device_bf16(y.get(), size_t(T * D)), per_selection) << "expert tiles, T " << T;
    cudaGraph_t graph;
    cudaGraphExec_t exec;
    DSV4_CUDA_CHECK(cudaStreamBeginCapture(ctx.stream(), cudaStreamCaptureModeThreadLocal));
    moe_forward(ctx, w, ws, x.get(), tok.get(), T, y_graph.get());
    DSV4_CUDA_CHECK(cudaStreamEndCapture(ctx.stream(), &graph));
    DSV4_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
    for (int i = 0; i < 5; ++i) DSV4_CUDA_CHECK(cudaGraphLaunch(exec, ctx.stream()));
    cudaEvent_t a, b;
    DSV4_CUDA_CHECK(cudaEventCreate(&a));
    DSV4_CUDA_CHECK(cudaEventCreate(&b));
    const int reps = 50;
    DSV4_CUDA_CHECK(cudaEventRecord(a, ctx.stream()));
    for (int i = 0; i < reps; ++i) DSV4_CUDA_CHECK(cudaGraphLaunch(exec, ctx.stream()));
    DSV4_CUDA_CHECK(cudaEventRecord(b, ctx.stream()));
    ctx.synchronize();
    float ms = 0;
    DSV4_CUDA_CHECK(cudaEventElapsedTime(&ms, a, b));
    const double us = 1e3 * ms / reps;
    // Bytes a step must read at least: distinct experts x 12.75 MiB + shared 24 MiB + router 2 MiB.
    const std::vector<int32_t> ids = ws.ids.download();
    std::vector<bool> used(size_t(E), false);
    int distinct = 0;
    for (int64_t i = 0; i < T * k; ++i) distinct += !used[size_t(ids[size_t(i)])], used[size_t(ids[size_t(i)])] = true;
    const double bytes = double(distinct) * (3.0 * I * D / 2 + 3.0 * I * D / 32) + 3.0 * I * D + 2.0 * E * D;
    const double gemv_bytes = double(T * k) * (3.0 * I * D / 2 + 3.0 * I * D / 32) + 3.0 * I * D + 2.0 * E * D;
    std::printf("[moe flash T=%lld %s] %.1f us per layer (graph), %d distinct experts, %.2f TB/s on distinct bytes, "
                "%.2f TB/s on bytes read\n",
                (long long)T, tiles ? "expert tiles" : "per selection", us, distinct, bytes / us * 1e-6,
                gemv_bytes / us * 1e-6);
    EXPECT_EQ(from_device_bf16(y.get(), size_t(T * D)), from_device_bf16(y_graph.get(), size_t(T * D)));
    cudaEventDestroy(a);
    cudaEventDestroy(b);
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(graph);
  }
}

// Prefill-sized MoE calls of the Flash-shaped layer (the grouped pass of moe_prefill.h), eager, timed
// with events; two calls give the same output (deterministic), and the host time of one call.
TEST(FfnLayer, FlashMoePrefillTiming) {
  if (!have_hopper_device()) GTEST_SKIP() << "no sm_90 CUDA device";
  DeviceContext ctx;
  const ModelConfig cfg = flash_moe_config();
  const DevMoeWeights w = flash_moe_weights(ctx);
  const int64_t D = 4096, Tmax = 2048;
  MoeWorkspace ws(ctx, cfg, Tmax);
  ws.grouped_prefill = true;
  DeviceBuffer<bf16> x(size_t(Tmax * D)), y(size_t(Tmax * D)), y_again(size_t(Tmax * D));
  fill_random_bf16(ctx, x.get(), x.size(), 21, 1.0f);
  std::vector<int32_t> toks(static_cast<size_t>(Tmax));
  for (int64_t t = 0; t < Tmax; ++t) toks[size_t(t)] = int32_t((t * 7919) % 129280);
  DeviceBuffer<int32_t> tok(toks);
  cudaEvent_t a, b;
  DSV4_CUDA_CHECK(cudaEventCreate(&a));
  DSV4_CUDA_CHECK(cudaEventCreate(&b));
  for (int64_t T : {1024, 2048}) {
    moe_forward(ctx, w, ws, x.get(), tok.get(), T, y_again.get());  // plans, workspace
    ctx.synchronize();
    const int reps = 5;
    DSV4_CUDA_CHECK(cudaEventRecord(a, ctx.stream()));
    const auto h0 = std::chrono::steady_clock::now();
    for (int i = 0; i < reps; ++i) moe_forward(ctx, w, ws, x.get(), tok.get(), T, y.get());
    const auto h1 = std::chrono::steady_clock::now();
    DSV4_CUDA_CHECK(cudaEventRecord(b, ctx.stream()));
    ctx.synchronize();
    float e = 0;
    DSV4_CUDA_CHECK(cudaEventElapsedTime(&e, a, b));
    const double ms = e / reps, host_ms = std::chrono::duration<double, std::milli>(h1 - h0).count() / reps;
    // Routed FLOPs of the call: 2 * T * k * 3 * I * D.
    const double tflops = 2.0 * double(T) * 6 * 3 * 2048 * 4096 / (ms * 1e-3) * 1e-12;
    std::printf("[moe flash prefill T=%lld] %.3f ms per layer (%.0f tok/s, routed %.1f TFLOP/s); host %.3f ms per call\n",
                (long long)T, ms, double(T) / (ms * 1e-3), tflops, host_ms);
    EXPECT_EQ(from_device_bf16(y.get(), size_t(T * D)), from_device_bf16(y_again.get(), size_t(T * D)));
  }
  cudaEventDestroy(a);
  cudaEventDestroy(b);
}

}  // namespace
}  // namespace dsv4::cuda
