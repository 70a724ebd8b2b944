// Sampling on the GPU in the CUDA step model (cuda_model.h decode_sample / forward_sample,
// cuda_step_model.h *_sampled): the kernel's draw is its CPU twin sample_philox's (runtime/sampler.h)
// id for id on the same logits; the model's sampled decode (inside the graph) picks sample_philox's
// ids on the logits it leaves on the device; through the engine, sampled requests reproduce per seed,
// greedy ones equal the logits path, and penalty / logprobs requests fall back to the host Sampler.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <random>

#include "backend/cuda/buffer.h"
#include "backend/cuda/context.h"
#include "backend/cuda/sampling.h"
#include "model_cuda/cuda_step_model.h"
#include "runtime/engine.h"
#include "support/engine_events.h"
#include "support/test_paths.h"

namespace dsv4::cuda {
namespace {

using namespace std::chrono_literals;

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
      SamplingParams sp;
      sp.temperature = c.t;
      sp.top_k = c.k;
      sp.top_p = c.p;
      sp.min_p = c.m;
      sp.seed = seed[size_t(r)];
      same += got[size_t(r)] == sample_philox(z.data() + r * V, V, sp, step[size_t(r)]);
    }
    std::printf("    T=%.1f k=%d p=%.2f min_p=%.2f: %d of %lld draws equal the CPU twin\n", c.t, c.k, c.p, c.m, same,
                (long long)rows);
    total += int(rows);
    equal += same;
  }
  // fp32 sums on the GPU vs double on the CPU: a draw may part only at a boundary's rounding.
  EXPECT_GE(equal, total - 2);
}

std::unique_ptr<CudaStepModel> load_bundled(int seqs) {
  for (const std::string& dir : {test::bundled_model_dir(), test::fixture_dir("tiny-shakespeare-fp8") + "/model"}) {
    if (!std::filesystem::exists(dir)) continue;
    try {
      return CudaStepModel::load(dir, seqs, 256, 16);
    } catch (const Error& e) {
      std::printf("    %s: not on the GPU: %s\n", dir.c_str(), e.what());
    }
  }
  return nullptr;
}

TEST(CudaSampling, SampledDecodeEqualsTheTwinOnItsLogits) {
  if (!have_hopper_device()) GTEST_SKIP() << "no sm_90 CUDA device";
  auto m = load_bundled(4);
  if (!m) GTEST_SKIP() << "no model the GPU loads";
  const Tokenizer tok = Tokenizer::load(test::bundled_model_dir());
  const int64_t V = m->config().vocab_size;
  const std::vector<std::string> prompts = {"ROMEO:\n", "JULIET:\nO Romeo, Romeo, wherefore art thou", "A", "HAMLET:\nTo be"};
  std::vector<RowSampling> rows(4);
  rows[0].params.temperature = 1.0f;
  rows[1].params.temperature = 0.7f;
  rows[1].params.top_p = 0.9f;
  rows[2].params.temperature = 0.0f;
  rows[3].host = true;  // logits come back
  std::vector<int> slots;
  std::vector<DecodeItem> batch;
  int checked = 0, equal = 0;
  for (size_t i = 0; i < prompts.size(); ++i) {
    rows[i].params.seed = 40 + i;
    slots.push_back(m->new_sequence());
    const std::vector<int32_t> p = tok.encode(prompts[i]);
    const SampledStep s = m->prefill_sampled(slots[i], 0, p, rows[i]);  // > 16 tokens: chunked
    ASSERT_EQ(s.ids.size(), 1u);
    if (rows[i].host) {
      EXPECT_EQ(s.ids[0], -1);
      EXPECT_EQ(s.logits.shape, (std::vector<int64_t>{1, V}));
    } else {
      const Tensor l = m->model().logits_rows({0});
      equal += s.ids[0] == sample_philox(l.ptr(), V, rows[i].params, 0);
      ++checked;
    }
    batch.push_back({slots[i], s.ids[0] >= 0 ? s.ids[0] : 5, int64_t(p.size())});
  }
  for (int step = 1; step <= 8; ++step) {
    for (auto& r : rows) r.step = uint64_t(step);
    const SampledStep s = m->decode_sampled(batch, rows);
    const Tensor l = m->model().logits_rows({0, 1, 2, 3});
    ASSERT_EQ(s.ids.size(), 4u);
    for (size_t i = 0; i < 4; ++i) {
      if (rows[i].host) {
        EXPECT_EQ(s.ids[i], -1);
        EXPECT_TRUE(std::equal(l.row(int64_t(i)), l.row(int64_t(i)) + V, s.logits.row(int64_t(i))));
        batch[i].token = int32_t(std::max_element(l.row(int64_t(i)), l.row(int64_t(i)) + V) - l.row(int64_t(i)));
      } else {
        equal += s.ids[i] == sample_philox(l.row(int64_t(i)), V, rows[i].params, rows[i].step);
        ++checked;
        batch[i].token = s.ids[i];
      }
      ++batch[i].pos;
    }
  }
  std::printf("    %d of %d sampled ids equal sample_philox on the step's logits\n", equal, checked);
  EXPECT_EQ(equal, checked);
}

std::vector<int32_t> run_engine(StepModel& m, const Tokenizer& tok, const GenerationRequest& r) {
  EngineOptions opt;
  opt.max_num_seqs = 4;
  opt.prefill_chunk = 64;  // the prompts fit one chunk, as in generate()
  opt.max_step_tokens = 64;
  Engine e(m, tok, opt);
  return test::collect_ids(*e.submit(r));
}

TEST(CudaSampling, EngineSamplesOnTheDevice) {
  if (!have_hopper_device()) GTEST_SKIP() << "no sm_90 CUDA device";
  auto m = load_bundled(4);
  if (!m) GTEST_SKIP() << "no model the GPU loads";
  const Tokenizer tok = Tokenizer::load(test::bundled_model_dir());
  GenerationRequest r;
  r.prompt = tok.encode("KING HENRY:\nOnce more unto the breach");
  r.sampling.temperature = 1.0f;
  r.sampling.seed = 1;
  r.stop.max_tokens = 48;
  const auto a = run_engine(*m, tok, r), b = run_engine(*m, tok, r);
  GenerationRequest r2 = r;
  r2.sampling.seed = 2;
  const auto c = run_engine(*m, tok, r2);
  ASSERT_EQ(a.size(), 48u);
  EXPECT_EQ(a, b);  // same seed, same ids
  EXPECT_NE(a, c);  // another seed, other ids
  // generate() over the model draws the same (Philox(seed, step)) from the same batch-1 logits.
  Sampler s(r.sampling);
  EXPECT_EQ(generate(*m, tok, r.prompt, s, r.stop).ids, a);

  // Penalties and logprobs: host rows, the request's Sampler; sampled and well formed.
  GenerationRequest pen = r, lp = r;
  pen.sampling.repetition_penalty = 1.3f;
  lp.top_logprobs = 3;
  EXPECT_EQ(run_engine(*m, tok, pen).size(), 48u);
  EngineOptions opt;
  opt.max_num_seqs = 4;
  Engine e(*m, tok, opt);
  auto ch = e.submit(lp);
  int tokens = 0;
  bool finished = false;
  const auto deadline = std::chrono::steady_clock::now() + 120s;
  while (!finished && std::chrono::steady_clock::now() < deadline)
    for (const EngineEvent& ev : ch->wait(100ms)) {
      if (ev.kind == EngineEvent::Kind::Token) {
        ++tokens;
        EXPECT_TRUE(ev.has_logprobs);
        EXPECT_EQ(ev.logprobs.top.size(), 3u);
        EXPECT_LE(ev.logprobs.chosen, 0.0f);
      }
      EXPECT_NE(ev.kind, EngineEvent::Kind::Failed) << ev.text;
      finished |= ev.final();
    }
  EXPECT_EQ(tokens, 48);

  // Greedy: the device argmax equals the host's on the logits path.
  GenerationRequest g = r;
  g.sampling.temperature = 0;
  Sampler sg(g.sampling);
  const auto ids_dev = run_engine(*m, tok, g);
  StepSequence seq(*m, 16);
  Tensor l = seq.feed(g.prompt);
  std::vector<int32_t> ids_host;
  const int64_t V = m->config().vocab_size;
  for (int i = 0; i < 48; ++i) {
    ids_host.push_back(int32_t(std::max_element(l.data.begin(), l.data.begin() + V) - l.data.begin()));
    if (i + 1 < 48) l = seq.feed({ids_host.back()});
  }
  EXPECT_EQ(ids_dev, ids_host);
}

}  // namespace
}  // namespace dsv4::cuda
