// The engine over data-parallel ranks (issue 16, `serve --ranks N`; runtime/rank_group.h): the runner
// spreads the sequences over 2 and 4 in-process ranks, each with its own slots and its share of the
// routed experts, and every engine step is one round of calls of all ranks. Several concurrent
// requests of different lengths (prefill chunks and decode batches sharing steps; greedy, backend-
// sampled and host-sampled draws) get the ids one rank gives them, on the bundled model and on tiny-q,
// and every rank ran some of them. With the prefix cache (one place per rank), conversations sharing a
// system prompt hit it on the rank that cached it, and the ids stay one rank's without a cache.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <filesystem>

#include "core/error.h"
#include "runtime/engine.h"
#include "runtime/rank_group.h"
#include "support/engine_events.h"
#include "support/test_paths.h"

namespace dsv4 {
namespace {

constexpr int kSeqs = 6;

// Six requests: prompts of 1 to 41 tokens, 5 to 15 tokens each; greedy, temperature 0.9 (drawn by the
// backend's sampler) and a repetition penalty (drawn on the host from the logits).
std::vector<GenerationRequest> requests(int64_t vocab) {
  std::vector<GenerationRequest> out;
  for (int i = 0; i < kSeqs; ++i) {
    GenerationRequest r;
    const int n = 1 + 8 * i;
    for (int t = 0; t < n; ++t) r.prompt.push_back(int32_t((11 + 37 * t + 5 * i + t * t) % vocab));
    r.stop.max_tokens = 5 + 2 * i;
    r.sampling.temperature = i % 3 == 1 ? 0.9f : 0.0f;
    r.sampling.seed = uint64_t(100 + i);
    if (i % 3 == 2) r.sampling.repetition_penalty = 1.3f;
    out.push_back(r);
  }
  return out;
}

struct Run {
  std::vector<std::vector<int32_t>> ids;  // per request
  std::vector<int64_t> rows;              // per rank: rows of its own sequences it computed
};

// The requests submitted together to an engine over `ranks` data-parallel ranks of the model in `dir`.
Run serve(const std::string& dir, int ranks, const Tokenizer& tok) {
  const BackendOptions o{.numerics = Numerics::Official,
                         .capacity = {.max_seqs = (kSeqs + ranks - 1) / ranks, .max_ctx = 4096, .max_tokens = 16}};
  const auto runner = load_ranked(dir, o, {.ranks = ranks, .data_parallel = true});
  std::vector<std::atomic<int64_t>> rows(static_cast<size_t>(ranks));
  for (int r = 0; r < ranks; ++r)  // each rank's runner is called on that rank's thread
    runner->rank(r).on_call([&rows, r](const Batch& b, const StepPlan&) { rows[size_t(r)] += b.size(); });
  EngineOptions opt;
  opt.max_num_seqs = kSeqs;
  opt.max_step_tokens = 16;  // prefill chunks and decodes of several sequences share steps
  opt.prefill_chunk = 6;
  opt.max_context = 512;
  Run run;
  {
    Engine engine(*runner, tok, opt);
    std::vector<std::shared_ptr<RequestChannel>> chans;
    for (const GenerationRequest& r : requests(runner->config().vocab_size)) chans.push_back(engine.submit(r));
    for (auto& ch : chans) run.ids.push_back(test::collect_ids(*ch));
  }
  for (auto& n : rows) run.rows.push_back(n.load());
  return run;
}

void expect_ranks_match_one(const std::string& dir) {
  const Tokenizer tok = Tokenizer::load(test::bundled_model_dir());  // tiny-q has none: any ids decode here
  const Run one = serve(dir, 1, tok);
  for (size_t i = 0; i < one.ids.size(); ++i) ASSERT_EQ(one.ids[i].size(), size_t(5 + 2 * i)) << "request " << i;
  for (int n : {2, 4}) {
    const Run got = serve(dir, n, tok);
    for (size_t i = 0; i < one.ids.size(); ++i) EXPECT_EQ(got.ids[i], one.ids[i]) << n << " ranks, request " << i;
    for (int r = 0; r < n; ++r) EXPECT_GT(got.rows[size_t(r)], 0) << n << " ranks: rank " << r << " ran no sequence";
  }
}

TEST(EngineRanks, BundledModelGivesOneRanksIds) { expect_ranks_match_one(test::bundled_model_dir()); }

TEST(EngineRanks, TinyQGivesOneRanksIds) {
  const std::string dir = test::fixture_dir("tiny-q") + "/model";
  if (!std::filesystem::exists(dir)) GTEST_SKIP() << "no " << dir;
  expect_ranks_match_one(dir);
}

// The prefix cache over 2 data-parallel ranks: a request sharing a cached 256-token prefix goes to the rank
// that holds it (a snapshot restores only into its own rank's backend: a wrong rank fails the request) and
// every request's ids are those of one rank without the cache. Waves of requests: one alone (it caches
// 256 on rank 0), one alone (it hits there), three at once (each restores 256 or computes it, as the
// loads allow; never another prefix), and the first again once all are done (it hits 256).
TEST(EngineRanks, PrefixCacheOverRanksGivesOneRanksIds) {
#if defined(__SANITIZE_ADDRESS__)
  GTEST_SKIP() << "two engines over prompts of ~300 tokens: minutes under AddressSanitizer on 2 cores";
#endif
  const std::string dir = test::bundled_model_dir();
  const Tokenizer tok = Tokenizer::load(dir);
  const int64_t V = std::min<int64_t>(tok.vocab_size(), 1000);  // ids of the model's vocabulary
  const std::vector<int32_t> sys = test::token_ids(260, 3, V);
  std::vector<GenerationRequest> reqs;
  for (int k = 0; k < 5; ++k) {
    GenerationRequest r;
    r.prompt = sys;
    const std::vector<int32_t> own = test::token_ids(20 + 7 * k, 50 + k, V);
    r.prompt.insert(r.prompt.end(), own.begin(), own.end());
    r.stop.max_tokens = 6;
    r.sampling.temperature = 0;
    reqs.push_back(r);
  }
  auto run = [&](int ranks, uint64_t cache_bytes, std::vector<int64_t>* cached, std::vector<int64_t>* rows,
                 PrefixCacheStats* st) {
    const BackendOptions o{.numerics = Numerics::Official, .capacity = {.max_seqs = 4 / ranks, .max_ctx = 512, .max_tokens = 96}};
    const auto runner = load_ranked(dir, o, {.ranks = ranks, .data_parallel = true});
    std::vector<std::atomic<int64_t>> n(static_cast<size_t>(ranks));
    for (int r = 0; r < ranks; ++r)
      runner->rank(r).on_call([&n, r](const Batch& b, const StepPlan&) { n[size_t(r)] += b.size(); });
    EngineOptions opt{.max_num_seqs = 4, .max_step_tokens = 96, .prefill_chunk = 96, .max_context = 512,
                      .prefix_cache_bytes = cache_bytes};
    std::vector<std::vector<int32_t>> ids(6);
    std::vector<int64_t> hit(6, -1);
    {
      Engine e(*runner, tok, opt);
      auto one = [&](size_t i, size_t k) { ids[i] = test::collect_ids(*e.submit(reqs[k]), &hit[i]); };
      one(0, 0);
      if (rows) rows->push_back(n[ranks - 1].load());  // the last rank's rows after the first request
      one(1, 1);
      if (rows) rows->push_back(n[ranks - 1].load());
      std::vector<std::shared_ptr<RequestChannel>> chans;
      for (size_t k = 2; k < 5; ++k) chans.push_back(e.submit(reqs[k]));
      for (size_t k = 2; k < 5; ++k) ids[k] = test::collect_ids(*chans[k - 2], &hit[k]);
      one(5, 0);
      if (st) *st = e.stats().prefix;
    }
    if (cached) *cached = hit;
    return ids;
  };
  const auto cold = run(1, 0, nullptr, nullptr, nullptr);
  for (const auto& x : cold) ASSERT_EQ(x.size(), 6u);
  std::vector<int64_t> cached, rows;
  PrefixCacheStats st;
  const auto warm = run(2, uint64_t(64) << 20, &cached, &rows, &st);
  EXPECT_EQ(warm, cold);
  EXPECT_EQ(cached[0], 0);
  EXPECT_EQ(cached[1], 256);  // on rank 0, which caches it (both ranks idle: the hit decides nothing else)
  EXPECT_EQ(rows, (std::vector<int64_t>{0, 0}));  // rank 1 ran neither of the first two
  for (size_t k = 2; k < 5; ++k) EXPECT_TRUE(cached[k] == 0 || cached[k] == 256) << "request " << k << ": " << cached[k];
  EXPECT_EQ(cached[5], 256);
  EXPECT_GE(st.hits, 2u);
  EXPECT_EQ(st.budget_bytes, uint64_t(128) << 20);  // 64 MiB for each rank
  EXPECT_EQ(st.lookups, 6u);
}

// Speculative decoding in the engine over a rank group that holds every sequence on rank 0 (the others
// mirror each call, MTP block's included, with 0 tokens), and over 2 and 4 data-parallel ranks (every
// rank's lanes run their round on it, all ranks at once in one schedule of calls, Runner::together;
// prefill chunks feed the MTP block on the sequence's rank): greedy requests give plain greedy ids of one rank, and every rank ran
// some of them; sampled requests (temperature 0.9, no penalties) the ids of one rank's speculative run.
TEST(EngineRanks, SpeculativeOverRanksGivesOneRanksIds) {
  const std::string dir = test::bundled_model_dir();
  const Tokenizer tok = Tokenizer::load(dir);
  std::vector<GenerationRequest> reqs = requests(std::min<int64_t>(tok.vocab_size(), 1000));
  for (GenerationRequest& r : reqs) r.sampling.repetition_penalty = 1;
  std::vector<GenerationRequest> greedy = reqs;
  for (GenerationRequest& r : greedy) r.sampling.temperature = 0;
  struct Got {
    std::vector<std::vector<int32_t>> ids;
    EngineStats st;
    std::vector<int64_t> rows;  // per data-parallel rank: rows of its own sequences
  };
  auto run = [&](int ranks, bool dp, int64_t drafts, const std::vector<GenerationRequest>& rs) {
    const int64_t seqs = dp ? (kSeqs + ranks - 1) / ranks : kSeqs;
    const auto runner = load_ranked(dir, {.numerics = Numerics::Official, .capacity = {.max_seqs = int(seqs), .max_ctx = 512, .max_tokens = 16}},
                                    {.ranks = ranks, .data_parallel = dp});
    std::vector<std::atomic<int64_t>> rows(static_cast<size_t>(runner->ranks()));
    for (int r = 0; r < runner->ranks(); ++r)
      runner->rank(r).on_call([&rows, r](const Batch& b, const StepPlan&) { rows[size_t(r)] += b.size(); });
    EngineOptions opt;
    opt.max_num_seqs = kSeqs;
    opt.max_step_tokens = 16;
    opt.prefill_chunk = 6;
    opt.max_context = 512;
    opt.speculative = drafts;
    Got g;
    {
      Engine engine(*runner, tok, opt);
      std::vector<std::shared_ptr<RequestChannel>> chans;
      for (const GenerationRequest& r : rs) chans.push_back(engine.submit(r));
      for (auto& ch : chans) g.ids.push_back(test::collect_ids(*ch));
      g.st = engine.stats();
    }
    for (auto& n : rows) g.rows.push_back(n.load());
    return g;
  };
  const auto plain = run(1, false, 0, greedy).ids;
  for (size_t i = 0; i < plain.size(); ++i) ASSERT_EQ(plain[i].size(), size_t(5 + 2 * i)) << "request " << i;
  const Got group = run(2, false, 2, greedy);
  EXPECT_EQ(group.ids, plain);
  EXPECT_GT(group.st.spec_verify_steps, 0u);
  EXPECT_GT(group.st.spec_draft_tokens, 0u);
  for (int n : {2, 4}) {
    const Got dp = run(n, true, 2, greedy);
    EXPECT_EQ(dp.ids, plain) << n << " data-parallel ranks";
    EXPECT_GT(dp.st.spec_verify_steps, 0u) << n << " data-parallel ranks";
    for (int r = 0; r < n; ++r) EXPECT_GT(dp.rows[size_t(r)], 0) << n << " ranks: rank " << r << " ran no sequence";
  }
  const auto sampled = run(1, false, 2, reqs).ids;
  EXPECT_EQ(run(2, true, 2, reqs).ids, sampled) << "sampled requests over 2 data-parallel ranks";
}

}  // namespace
}  // namespace dsv4
