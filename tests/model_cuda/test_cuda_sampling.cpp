// Sampling on the GPU: the kernel's draw is its CPU twin's (cpu::sample_philox, backend/cpu/sampling.h)
// id for id on the same logits; the CUDA backend's sampled calls (the decode graph ends with the
// sampler) pick the twin's ids on the logits they leave on the device. (The engine's device sampling,
// sampled requests reproducing per seed and the host fallback for penalties / logprobs, is the
// runner's: tests/runtime.)
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <random>

#include "backend/cuda/buffer.h"
#include "backend/cuda/context.h"
#include "backend/cuda/sampling.h"
#include "backend/cpu/sampling.h"
#include "model_steps.h"
#include "support/test_paths.h"

namespace dsv4::cuda {
namespace {

TEST(CudaSampling, KernelDrawsEqualTheCpuTwin) {
  if (!have_hopper_device()) GTEST_SKIP() << "no sm_90 CUDA device";
  DeviceContext ctx;
  const int64_t V = 129280, rows = 64;
  std::mt19937 rng(71);
  std::normal_distribution<float> nd(0.0f, 3.0f);
  std::vector<float> z(size_t(rows * V));
  for (float& v : z) v = nd(rng);
  struct Cfg {
    float t;
    int k;
    float p, m;
  };
  int total = 0, equal = 0;
  for (const Cfg& c : {Cfg{1.0f, 0, 1.0f, 0.0f}, Cfg{0.8f, 40, 1.0f, 0.0f}, Cfg{0.7f, 0, 0.9f, 0.0f},
                       Cfg{1.2f, 0, 1.0f, 0.05f}, Cfg{0.6f, 100, 0.95f, 0.02f}, Cfg{0.0f, 0, 1.0f, 0.0f}}) {
    std::vector<float> temp(size_t(rows), c.t), top_p(size_t(rows), c.p), min_p(size_t(rows), c.m);
    std::vector<int32_t> top_k(size_t(rows), c.k), out(size_t(rows), -1);
    std::vector<uint64_t> seed(static_cast<size_t>(rows)), step(static_cast<size_t>(rows));
    for (int64_t r = 0; r < rows; ++r) {
      seed[size_t(r)] = 1000 + uint64_t(r % 7);
      step[size_t(r)] = uint64_t(r * 13);
    }
    DeviceBuffer<float> dz(z), dt(temp), dp(top_p), dm(min_p);
    DeviceBuffer<int32_t> dk(top_k), dout(out);
    DeviceBuffer<uint64_t> ds(seed), dst(step);
    SampleParams p;
    p.logits = dz.get();
    p.out = dout.get();
    p.temperature = dt.get();
    p.top_k = dk.get();
    p.top_p = dp.get();
    p.min_p = dm.get();
    p.seed = ds.get();
    p.step = dst.get();
    p.rows = rows;
    p.vocab = V;
    p.logits_stride = V;
    sample_tokens(ctx, p);
    ctx.synchronize();
    const std::vector<int32_t> got = dout.download();
    int same = 0;
    for (int64_t r = 0; r < rows; ++r) {
      const SampleRow row{.temperature = c.t, .top_k = c.k, .top_p = c.p, .min_p = c.m, .seed = seed[size_t(r)],
                          .step = step[size_t(r)]};
      same += got[size_t(r)] == cpu::sample_philox(z.data() + r * V, V, row);
    }
    std::printf("    T=%.1f k=%d p=%.2f min_p=%.2f: %d of %lld draws equal the CPU twin\n", c.t, c.k, c.p, c.m, same,
                (long long)rows);
    total += int(rows);
    equal += same;
  }
  // The inputs are seeded and both sides deterministic: every draw is the twin's (H200, 2026-12-01:
  // 384 / 384).
  EXPECT_EQ(equal, total);
}

// The backend's sampled calls: a prefill chunk whose last row is sampled, then decode steps of four
// sequences whose graph ends with sample_tokens (each row its own parameters, greedy among them): every
// id is the CPU twin's draw on the logits the step leaves on the device.
TEST(CudaSampling, SampledStepsEqualTheTwinOnTheirLogits) {
  if (!have_hopper_device()) GTEST_SKIP() << "no sm_90 CUDA device";
  auto m = dsv4::test::load_cuda(dsv4::test::bundled_model_dir(), KernelTier::Exact, 256, 16, 4);
  Backend& be = m->backend();
  const int64_t V = m->config().vocab_size;
  std::vector<SampleRow> rows = {{.temperature = 1.0f, .seed = 40}, {.temperature = 0.7f, .top_p = 0.9f, .seed = 41},
                                 {.temperature = 0.0f, .seed = 42}, {.temperature = 1.1f, .top_k = 20, .min_p = 0.02f, .seed = 43}};
  std::vector<int32_t> next(4), pos(4);
  int checked = 0, equal = 0;
  for (int s = 0; s < 4; ++s) {
    std::vector<int32_t> prompt(size_t(5 + 3 * s));
    for (size_t i = 0; i < prompt.size(); ++i) prompt[i] = int32_t((i * 17 + size_t(s) * 29 + 1) % size_t(V));
    const int64_t T = int64_t(prompt.size());
    Batch b{.ids = prompt, .positions = {}, .slots = std::vector<int32_t>(size_t(T), s), .run_len = T};
    for (int64_t t = 0; t < T; ++t) b.positions.push_back(int32_t(t));
    be.set_sampling({rows[size_t(s)]});
    m->step(b, StepPlan{.head_first = T - 1, .head_rows = 1, .sample = true});
    next[size_t(s)] = be.sampled(1).at(0);
    const Tensor l = be.logits(1);
    equal += next[size_t(s)] == cpu::sample_philox(l.ptr(), V, rows[size_t(s)]);
    ++checked;
    pos[size_t(s)] = int32_t(T);
  }
  for (int step = 1; step <= 8; ++step) {
    for (auto& r : rows) r.step = uint64_t(step);
    const Batch b{.ids = next, .positions = pos, .slots = {0, 1, 2, 3}, .run_len = 1};
    be.set_sampling(rows);
    m->step(b, StepPlan{.head_first = 0, .head_rows = 4, .sample = true});
    const std::vector<int32_t> ids = be.sampled(4);
    const Tensor l = be.logits(4);
    for (size_t i = 0; i < 4; ++i) {
      equal += ids[i] == cpu::sample_philox(l.row(int64_t(i)), V, rows[i]);
      ++checked;
      if (rows[i].temperature == 0) EXPECT_EQ(ids[i], dsv4::test::argmax(l.row(int64_t(i)), V));
      next[i] = ids[i];
      ++pos[i];
    }
  }
  std::printf("    %d of %d sampled ids equal the CPU twin's draw on the step's logits\n", equal, checked);
  EXPECT_EQ(equal, checked);
}

}  // namespace
}  // namespace dsv4::cuda
