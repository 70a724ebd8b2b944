// attention_forward against the CPU model's attention (official numerics) on the tiny-q fixture: every
// layer (sliding, CSA, HCA), several sequences in separate slots, prefill chunks (one longer than the
// window, one continuing a sequence) and then batched decode steps with each sequence at its own
// position. Tolerance: bf16 level (rel-L2 of each call's output).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

#include "backend/cuda/context.h"
#include "core/dtype.h"
#include "io/weights.h"
#include "model/model.h"
#include "model_cuda/attention_layer.h"
#include "support/test_paths.h"

namespace dsv4 {

namespace {

using cuda::bf16;

struct Diff {
  double rel_l2 = 0, max_abs = 0, same = 0;  // same: share of bit-identical outputs
};

Diff diff(const std::vector<float>& got, const Tensor& ref) {
  double dd = 0, rr = 0, mx = 0, same = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    same += got[i] == ref.data[i];
    const double d = double(got[i]) - ref.data[i];
    dd += d * d;
    rr += double(ref.data[i]) * ref.data[i];
    mx = std::max(mx, std::fabs(d));
  }
  return {std::sqrt(dd / std::max(rr, 1e-30)), mx, same / double(std::max<size_t>(got.size(), 1))};
}

cuda::DeviceBuffer<bf16> to_device(const Tensor& x) {
  std::vector<uint16_t> bits(x.data.size());
  for (size_t i = 0; i < bits.size(); ++i) bits[i] = f32_to_bf16(x.data[i]);
  cuda::DeviceBuffer<bf16> d(bits.size());
  DSV4_CUDA_CHECK(cudaMemcpy(d.get(), bits.data(), bits.size() * 2, cudaMemcpyHostToDevice));
  return d;
}

std::vector<float> from_device(const cuda::DeviceBuffer<bf16>& d, size_t n) {
  std::vector<uint16_t> bits(n);
  DSV4_CUDA_CHECK(cudaMemcpy(bits.data(), d.get(), n * 2, cudaMemcpyDeviceToHost));
  std::vector<float> f(n);
  for (size_t i = 0; i < n; ++i) f[i] = bf16_to_f32(bits[i]);
  return f;
}

void run_fixture(const std::string& name) {
  if (!cuda::have_hopper_device()) GTEST_SKIP() << "no sm_90 CUDA device";
  const std::string dir = test::fixture_dir(name) + "/model";
  auto model = Model::load(dir, Numerics::Official);
  const ModelConfig& cfg = model->config();
  auto ckpt = Checkpoint::open(dir);
  const Weights views = bind_weights(cfg, *ckpt);
  cuda::DeviceContext ctx;
  const int64_t D = cfg.hidden_size, max_tokens = 64, max_ctx = 256;
  cuda::AttentionWorkspace ws(cfg, max_tokens, max_ctx);
  std::mt19937_64 gen(1234);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  auto random_x = [&](int64_t T) {
    Tensor x({T, D});
    for (float& v : x.data) v = round_bf16(nd(gen));
    return x;
  };
  double worst = 0, same_min = 1;

  for (size_t li = 0; li < cfg.layers.size(); ++li) {
    const LayerSpec& spec = cfg.layers[li];
    const auto dw = cuda::upload_attention_weights(ctx, views.layers[li].attn, cfg, spec);
    const int64_t nseq = 3;
    cuda::AttentionLayerState dst(cfg, spec, nseq, max_ctx, max_tokens);
    std::vector<SequenceState> cpu;
    for (int64_t s = 0; s < nseq; ++s) cpu.push_back(model->new_state());
    std::vector<int64_t> pos(nseq, 0);

    // One call: tokens of sequences `seqs` (run_len each), compared with the CPU per sequence.
    auto call = [&](const std::vector<int64_t>& seqs, int64_t run_len, const char* what) {
      const int64_t T = int64_t(seqs.size()) * run_len;
      Tensor x = random_x(T);
      std::vector<int32_t> hp, hs;
      for (int64_t s : seqs)
        for (int64_t i = 0; i < run_len; ++i) {
          hp.push_back(int32_t(pos[size_t(s)] + i));
          hs.push_back(int32_t(s));
        }
      cuda::DeviceBuffer<int32_t> dp(hp), dsl(hs);
      auto dx = to_device(x);
      cuda::DeviceBuffer<bf16> dout(size_t(T * D));
      cuda::AttentionBatch b;
      b.tokens = T;
      b.run_len = run_len;
      b.positions = dp.get();
      b.slots = dsl.get();
      cuda::attention_forward(ctx, cfg, dw, dst, ws, b, dx.get(), dout.get());
      ctx.synchronize();
      const std::vector<float> got = from_device(dout, size_t(T * D));
      Tensor ref({T, D});
      for (size_t r = 0; r < seqs.size(); ++r) {
        const int64_t s = seqs[r];
        Tensor xs({run_len, D});
        std::copy(x.row(int64_t(r) * run_len), x.row(int64_t(r) * run_len) + run_len * D, xs.ptr());
        const Tensor o = model->attention_layer(li, cpu[size_t(s)].layers[li], xs, pos[size_t(s)]);
        std::copy(o.data.begin(), o.data.end(), ref.row(int64_t(r) * run_len));
        pos[size_t(s)] += run_len;
      }
      const Diff d = diff(got, ref);
      worst = std::max(worst, d.rel_l2);
      same_min = std::min(same_min, d.same);
      std::printf("[%s layer %zu %s ratio %d] %s T=%lld rel_l2=%.3e max|d|=%.3e identical %.4f\n", name.c_str(), li,
                  attn_kind_name(spec.attn), spec.ratio, what, (long long)T, d.rel_l2, d.max_abs, d.same);
      // exact_linear, the twin-ordered attention and CPU-rounded transcendentals: bit-identical but for
      // rare one-ulp flips (glibc's expf / sinf are not always correctly rounded).
      EXPECT_LT(d.rel_l2, 2e-3) << "layer " << li << " " << what;
    };
    call({0}, 45, "prefill seq0");
    call({1}, 20, "prefill seq1");
    call({1}, 19, "prefill seq1 chunk 2");
    call({2}, 37, "prefill seq2");
    for (int step = 0; step < 6; ++step) call({0, 1, 2}, 1, "decode batch");
    call({2}, 1, "decode seq2 alone");
  }
  std::printf("[%s] worst rel_l2 over all calls: %.3e, least identical share %.4f\n", name.c_str(), worst, same_min);
}

TEST(CudaAttentionLayer, TinyQ) { run_fixture("tiny-q"); }

// A decode call captured in a CUDA graph (after prepare()) gives the same bits as the direct call on
// an identical state; then the replay time of one layer's decode step (batch 3) is printed.
TEST(CudaAttentionLayer, DecodeGraphCapture) {
  if (!cuda::have_hopper_device()) GTEST_SKIP() << "no sm_90 CUDA device";
  const std::string dir = test::fixture_dir("tiny-q") + "/model";
  const ModelConfig cfg = load_config(dir);
  auto ckpt = Checkpoint::open(dir);
  const Weights views = bind_weights(cfg, *ckpt);
  cuda::DeviceContext ctx;
  const int64_t D = cfg.hidden_size, T = 3;
  for (size_t li : {size_t(1), size_t(2)}) {
    const auto dw = cuda::upload_attention_weights(ctx, views.layers[li].attn, cfg, cfg.layers[li]);
    cuda::AttentionWorkspace ws(cfg, 64, 256);
    cuda::AttentionLayerState a(cfg, cfg.layers[li], T, 256, 64), b(cfg, cfg.layers[li], T, 256, 64);
    std::mt19937_64 gen(7);
    std::normal_distribution<float> nd(0.0f, 1.0f);
    Tensor xp({40, D}), xd({T, D});
    for (float& v : xp.data) v = round_bf16(nd(gen));
    for (float& v : xd.data) v = round_bf16(nd(gen));
    auto dxp = to_device(xp), dxd = to_device(xd);
    cuda::DeviceBuffer<bf16> out_a(size_t(40 * D)), out_b(size_t(40 * D));
    std::vector<int32_t> pp(40), dec = {40, 40, 40}, sl = {0, 1, 2};
    for (int i = 0; i < 40; ++i) pp[size_t(i)] = i;
    cuda::DeviceBuffer<int32_t> dpp(pp), ddec(dec), dsl(sl);
    for (int32_t s = 0; s < 3; ++s) {
      cuda::DeviceBuffer<int32_t> slot(std::vector<int32_t>(40, s));
      cuda::AttentionBatch pb{40, 40, dpp.get(), slot.get()};
      cuda::attention_forward(ctx, cfg, dw, a, ws, pb, dxp.get(), out_a.get());
      cuda::attention_forward(ctx, cfg, dw, b, ws, pb, dxp.get(), out_b.get());
      ctx.synchronize();
    }
    cuda::AttentionBatch db{T, 1, ddec.get(), dsl.get()};
    ws.prepare(ctx, cfg, dw, T);
    cuda::attention_forward(ctx, cfg, dw, a, ws, db, dxd.get(), out_a.get());
    cudaGraph_t graph;
    cudaGraphExec_t exec;
    DSV4_CUDA_CHECK(cudaStreamBeginCapture(ctx.stream(), cudaStreamCaptureModeThreadLocal));
    cuda::attention_forward(ctx, cfg, dw, b, ws, db, dxd.get(), out_b.get());
    DSV4_CUDA_CHECK(cudaStreamEndCapture(ctx.stream(), &graph));
    DSV4_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
    DSV4_CUDA_CHECK(cudaGraphLaunch(exec, ctx.stream()));
    ctx.synchronize();
    EXPECT_EQ(from_device(out_a, size_t(T * D)), from_device(out_b, size_t(T * D))) << "layer " << li;
    cudaEvent_t e0, e1;
    DSV4_CUDA_CHECK(cudaEventCreate(&e0));
    DSV4_CUDA_CHECK(cudaEventCreate(&e1));
    const int reps = 200;
    DSV4_CUDA_CHECK(cudaEventRecord(e0, ctx.stream()));
    for (int r = 0; r < reps; ++r) DSV4_CUDA_CHECK(cudaGraphLaunch(exec, ctx.stream()));
    DSV4_CUDA_CHECK(cudaEventRecord(e1, ctx.stream()));
    ctx.synchronize();
    float ms = 0;
    DSV4_CUDA_CHECK(cudaEventElapsedTime(&ms, e0, e1));
    std::printf("[graph] tiny-q layer %zu (%s) decode batch 3: %.2f us per replay\n", li,
                attn_kind_name(cfg.layers[li].attn), 1000.0 * ms / reps);
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(graph);
  }
}
TEST(CudaAttentionLayer, TinyShakespeareFp8) { run_fixture("tiny-shakespeare-fp8"); }

}  // namespace
}  // namespace dsv4
