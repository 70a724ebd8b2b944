// The engine with its prefix cache (EngineOptions::prefix_cache_bytes, runtime/prefix_reuse.h) on the
// bundled model: multi-turn chat hits the previous turn's snapshot and the stats count it; the greedy ids
// with the cache equal those without it; a budget of about one snapshot evicts and the ids stay exact.
// Prompts are a few hundred tokens (the CPU CI runs these again under AddressSanitizer).
#include <gtest/gtest.h>

#include <chrono>

#include "runtime/engine.h"
#include "support/engine_events.h"
#include "support/test_paths.h"

namespace dsv4 {
namespace {

using namespace std::chrono_literals;

// The greedy ids of a request read to its final event (empty and a test failure when it failed); the
// prompt tokens it restored from the cache into `cached`.
std::vector<int32_t> ids_of(RequestChannel& ch, int64_t* cached = nullptr) {
  std::vector<int32_t> ids;
  const auto deadline = std::chrono::steady_clock::now() + 300s;
  while (std::chrono::steady_clock::now() < deadline) {
    for (const EngineEvent& e : ch.wait(100ms)) {
      if (e.kind == EngineEvent::Kind::Token) ids.push_back(e.id);
      if (e.kind == EngineEvent::Kind::Finished) {
        if (cached) *cached = e.cached_tokens;
        return ids;
      }
      if (e.kind == EngineEvent::Kind::Failed) {
        ADD_FAILURE() << "request failed: " << e.text;
        return {};
      }
    }
  }
  ADD_FAILURE() << "no final event";
  return ids;
}

std::vector<int32_t> concat(std::vector<int32_t> a, const std::vector<int32_t>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

class EnginePrefix : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    const std::string dir = test::bundled_model_dir();
    model_ = Model::load(dir, Numerics::Official).release();
    tok_ = new Tokenizer(Tokenizer::load(dir));
  }
  static void TearDownTestSuite() {
    delete model_;
    delete tok_;
  }
  static std::vector<int32_t> ids(int64_t n, int32_t seed) { return test::token_ids(n, seed, model_->config().vocab_size); }
  // Greedy, `n` tokens exactly (no stop id), so that every turn's length is known.
  static GenerationRequest greedy(std::vector<int32_t> prompt, int n) {
    GenerationRequest r;
    r.prompt = std::move(prompt);
    r.sampling.temperature = 0;
    r.stop.max_tokens = n;
    return r;
  }
  // Small steps and chunks: a prompt of a few hundred tokens takes several steps and chunks, so the
  // chunk cuts at the snapshot points matter.
  static EngineOptions options(uint64_t prefix_bytes) {
    return {.max_num_seqs = 4, .max_step_tokens = 96, .prefill_chunk = 96, .prefix_cache_bytes = prefix_bytes};
  }
  // Three chat turns: turn t+1's prompt is turn t's prompt + its answer + a new message. The answers.
  static std::vector<std::vector<int32_t>> chat(Engine& e, const std::vector<int32_t>& first, int turns = 3) {
    std::vector<std::vector<int32_t>> answers;
    std::vector<int32_t> prompt = first;
    for (int t = 0; t < turns; ++t) {
      int64_t cached = -1;
      answers.push_back(ids_of(*e.submit(greedy(prompt, 12)), &cached));
      // What the request restored: 0, then each earlier turn's last boundary (128, 256), or none.
      const int64_t want = e.prefix_cache() == nullptr || t == 0 ? 0 : 128 * t;
      EXPECT_EQ(cached, want) << "turn " << t;
      prompt = concat(concat(prompt, answers.back()), ids(70, 40 + t));
    }
    return answers;
  }
  static Model* model_;
  static Tokenizer* tok_;
};
Model* EnginePrefix::model_ = nullptr;
Tokenizer* EnginePrefix::tok_ = nullptr;

TEST_F(EnginePrefix, OffByDefault) {
  Engine e(*model_, *tok_, options(0));
  EXPECT_EQ(e.prefix_cache(), nullptr);
  EXPECT_EQ(ids_of(*e.submit(greedy(ids(140, 1), 2))).size(), 2u);
  const EngineStats s = e.stats();
  EXPECT_FALSE(s.prefix_cache);
  EXPECT_EQ(s.prefix.lookups, 0u);
}

// Turn 0 (200 tokens) snapshots at 128; turn 1 (200 + 12 + 70 = 282) hits 128 and snapshots at 256;
// turn 2 (282 + 12 + 70 = 364) hits 256 (its own last boundary: nothing new to snapshot). The ids equal those of an engine without the cache.
TEST_F(EnginePrefix, MultiTurnChatHitsAndEqualsNoCache) {
#if defined(__SANITIZE_ADDRESS__)
  GTEST_SKIP() << "two engines over 3 turns of ~300 tokens: minutes under AddressSanitizer on 2 cores";
#endif
  const auto first = ids(200, 7);
  std::vector<std::vector<int32_t>> cold;
  {
    Engine e(*model_, *tok_, options(0));
    cold = chat(e, first);
  }
  Engine e(*model_, *tok_, options(uint64_t(256) << 20));
  const auto warm = chat(e, first);
  EXPECT_EQ(warm, cold);
  const PrefixCacheStats s = e.stats().prefix;
  EXPECT_TRUE(e.stats().prefix_cache);
  EXPECT_EQ(s.lookups, 3u);
  EXPECT_EQ(s.hits, 2u);
  EXPECT_EQ(s.hit_tokens, 128u + 256u);
  EXPECT_EQ(s.miss_tokens, (200u + 282u + 364u) - (128u + 256u));
  EXPECT_EQ(s.inserts, 2u);  // at 128 and 256: turn 2's last boundary, 256, is its hit
  EXPECT_EQ(s.evictions, 0u);
  EXPECT_EQ(s.entries, s.inserts);
  EXPECT_GT(s.bytes, 0u);
  EXPECT_EQ(s.budget_bytes, uint64_t(256) << 20);
  // The prompt tokens counted are whole prompts, cached or not.
  EXPECT_EQ(e.stats().prompt_tokens, 200u + 282u + 364u);
}

// Concurrent conversations through one cached engine give each conversation's ids alone.
TEST_F(EnginePrefix, ConcurrentRequestsWithTheCacheEqualNoCache) {
#if defined(__SANITIZE_ADDRESS__)
  GTEST_SKIP() << "six requests of ~260 tokens twice: minutes under AddressSanitizer on 2 cores";
#endif
  const auto sys = ids(260, 3);
  std::vector<std::vector<int32_t>> prompts;
  for (int k = 0; k < 3; ++k) prompts.push_back(concat(sys, ids(20 + 7 * k, 50 + k)));
  auto run = [&](uint64_t bytes) {
    Engine e(*model_, *tok_, options(bytes));
    std::vector<std::vector<int32_t>> out;
    out.push_back(ids_of(*e.submit(greedy(prompts[0], 6))));  // fills the cache at 256
    std::vector<std::shared_ptr<RequestChannel>> chs;
    for (const auto& p : prompts) chs.push_back(e.submit(greedy(p, 6)));
    for (auto& ch : chs) out.push_back(ids_of(*ch));
    return std::pair(out, e.stats().prefix);
  };
  const auto [cold, cold_stats] = run(0);
  const auto [warm, st] = run(uint64_t(256) << 20);
  EXPECT_EQ(warm, cold);
  EXPECT_EQ(cold_stats.lookups, 0u);
  EXPECT_EQ(st.lookups, 4u);
  EXPECT_EQ(st.hits, 3u);  // every later prompt starts with the first's 256 tokens
  EXPECT_EQ(st.hit_tokens, 3u * 256);
}

// A budget of about 1.5 snapshots: each new conversation's snapshot evicts the last one, a prompt whose
// prefix went recomputes it, and every id stays that of the engine without the cache.
TEST_F(EnginePrefix, EvictionUnderASmallBudgetKeepsOutputsExact) {
#if defined(__SANITIZE_ADDRESS__)
  GTEST_SKIP() << "eight requests of ~200 tokens twice: minutes under AddressSanitizer on 2 cores";
#endif
  const auto a = ids(190, 11), b = ids(190, 12);
  uint64_t one = 0;  // one entry at 128 tokens
  {
    Engine probe(*model_, *tok_, options(uint64_t(256) << 20));
    ids_of(*probe.submit(greedy(a, 1)));
    one = probe.stats().prefix.bytes;
    ASSERT_GT(one, 0u);
  }
  // a, b (evicts a), a again (a's prefix gone: recomputed, evicts b), a once more (hits).
  const std::vector<std::vector<int32_t>> prompts = {concat(a, ids(5, 1)), concat(b, ids(5, 2)), concat(a, ids(9, 3)),
                                                     concat(a, ids(4, 4))};
  auto run = [&](uint64_t bytes) {
    Engine e(*model_, *tok_, options(bytes));
    std::vector<std::vector<int32_t>> out;
    for (const auto& p : prompts) out.push_back(ids_of(*e.submit(greedy(p, 5))));
    return std::pair(out, e.stats().prefix);
  };
  const auto [cold, cold_stats] = run(0);
  const auto [warm, st] = run(one + one / 2);
  EXPECT_EQ(warm, cold);
  EXPECT_EQ(st.lookups, 4u);
  EXPECT_EQ(st.hits, 1u);  // only the last
  EXPECT_EQ(st.hit_tokens, 128u);
  EXPECT_EQ(st.evictions, 2u);
  EXPECT_EQ(st.entries, 1u);
  EXPECT_LE(st.bytes, st.budget_bytes);
}

// Snapshots in the cache hold KV pages. Over a bounded pool (as the GPU's: Capacity::kv_pages) of one
// full context, one 300-token request leaves a snapshot (at 256) holding 2 of the pool's 4 pages per
// group, and the next request needs 3 of them: the engine evicts cached snapshots, oldest first, instead of running the
// pool out mid-prefill. Every request succeeds with the ids of an engine without the cache.
TEST_F(EnginePrefix, BoundedPagePoolEvictsSnapshotsInsteadOfFailing) {
#if defined(__SANITIZE_ADDRESS__)
  GTEST_SKIP() << "two engines over 4 requests of 300 tokens: minutes under AddressSanitizer on 2 cores";
#endif
  auto load = [](int64_t pages) {
    return Model::load(test::bundled_model_dir(),
                       BackendOptions{.device = Device::Cpu,
                                      .numerics = Numerics::Official,
                                      .capacity = {.max_seqs = 1, .max_ctx = 512, .max_tokens = 96, .kv_pages = pages}});
  };
  const KvPageInfo geometry = load(0)->backend().kv_pages();
  ASSERT_EQ(geometry.page_tokens, 128);
  ASSERT_GT(geometry.paged_groups, 0) << "the bundled model has compressed layers";
  auto bounded = load(geometry.pages_needed(512));
  EngineOptions o = options(uint64_t(1) << 30);  // only the pool, not the byte budget, evicts
  o.max_num_seqs = 1;
  Engine cached(*bounded, *tok_, o);
  Engine cold(*model_, *tok_, options(0));
  for (int32_t i = 0; i < 4; ++i) {
    const auto prompt = ids(300, 90 + i);
    const auto want = ids_of(*cold.submit(greedy(prompt, 4)));
    EXPECT_EQ(ids_of(*cached.submit(greedy(prompt, 4))), want) << "request " << i;
    const KvPageInfo now = bounded->backend().kv_pages();
    EXPECT_LE(now.used, now.capacity);
  }
  const EngineStats st = cached.stats();
  EXPECT_EQ(st.prefix.inserts, 4u);    // the prompt's last boundary (256) of each request
  EXPECT_EQ(st.prefix.evictions, 3u);  // each later request needed the pages the one before left cached
}

}  // namespace
}  // namespace dsv4
