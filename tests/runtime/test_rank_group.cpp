// The rank group (runtime/rank_group.h) on the CPU, bundled model: rank 0's Runner over 2 and 4
// in-process ranks gives the logits and the drawn tokens of one rank bit for bit — a prefill split in
// pieces (Model::step and Model::forward), a decode batch of two sequences, backend and host draws —
// because the other ranks make each call with 0 tokens; a group whose ranks cannot split the experts
// fails to load with one line.
#include <gtest/gtest.h>

#include <string>

#include "core/error.h"
#include "runtime/rank_group.h"
#include "support/test_paths.h"

namespace dsv4 {
namespace {

BackendOptions options() { return {.capacity = {.max_seqs = 2, .max_ctx = 4096, .max_tokens = 5}}; }

std::vector<int32_t> prompt(int n, int32_t from) {
  std::vector<int32_t> v;
  for (int i = 0; i < n; ++i) v.push_back(int32_t((from + 37 * i + i * i) % 1000));
  return v;
}

// What one runner computes: every position's logits of sequence A (pieces of at most 5 tokens through
// Model::forward), the last logits of B (pieces through Model::step), then 4 decode batches of A and B
// with A drawn greedily on the backend and B by a host Sampler with a repeat penalty.
struct Outcome {
  std::vector<float> logits;
  std::vector<int32_t> ids;
  bool operator==(const Outcome&) const = default;
};

Outcome drive(Runner& r) {
  Outcome o;
  const int a = r.new_sequence(), b = r.new_sequence();
  const auto pa = prompt(12, 5), pb = prompt(7, 11);
  Tensor la = r.prefill(a, 0, pa, true), lb = r.prefill(b, 0, pb);
  o.logits.insert(o.logits.end(), la.data.begin(), la.data.end());
  o.logits.insert(o.logits.end(), lb.data.begin(), lb.data.end());
  SamplingParams g, p;
  g.temperature = p.temperature = 0.0f;
  p.repetition_penalty = 1.3f;
  Sampler greedy(g), penal(p);
  std::vector<int32_t> hist_b = pb;
  int32_t ta = 7, tb = 9;
  for (int s = 0; s < 4; ++s) {
    std::vector<Draw> d = {{.sampler = &greedy, .step = uint64_t(s)}, {.sampler = &penal, .history = &hist_b, .step = uint64_t(s)}};
    r.decode({{.slot = a, .token = ta, .pos = int64_t(pa.size()) + s}, {.slot = b, .token = tb, .pos = int64_t(pb.size()) + s}}, d);
    ta = d[0].id;
    tb = d[1].id;
    hist_b.push_back(tb);
    o.ids.push_back(ta);
    o.ids.push_back(tb);
  }
  return o;
}

TEST(RankGroup, RanksGiveOneRanksLogitsAndTokens) {
  const auto one = load_ranked(test::bundled_model_dir(), options(), {.ranks = 1});
  const Outcome want = drive(*one);
  ASSERT_EQ(want.ids.size(), 8u);
  for (int n : {2, 4}) {
    const auto group = load_ranked(test::bundled_model_dir(), options(), {.ranks = n});
    ASSERT_NE(group, nullptr);
    EXPECT_TRUE(drive(*group) == want) << n << " ranks";
  }
}

// Data-parallel ranks: A goes to rank 0 and B to rank 1 (the least loaded), each rank computes its own
// sequence's rows while the others make calls of 0 tokens (or their own rows, in the decode batches),
// and each row is what one rank computes, bit for bit.
TEST(RankGroup, DataParallelRanksGiveOneRanksLogitsAndTokens) {
  const auto one = load_ranked(test::bundled_model_dir(), options(), {.ranks = 1});
  const Outcome want = drive(*one);
  for (int n : {2, 4}) {
    const auto group = load_ranked(test::bundled_model_dir(), options(), {.ranks = n, .data_parallel = true});
    ASSERT_EQ(group->ranks(), n);
    EXPECT_EQ(group->max_sequences(), 2 * n);
    EXPECT_TRUE(drive(*group) == want) << n << " data-parallel ranks";
    EXPECT_EQ(group->rank_of(0), 0);  // drive's A and B, still held
    EXPECT_EQ(group->rank_of(1), 1);
    EXPECT_EQ(group->rank_of(group->new_sequence()), n == 2 ? 0 : 2);
    group->release(1);
    EXPECT_EQ(group->rank_of(group->new_sequence()), 1) << "the freed rank is the least loaded";
  }
}

TEST(RankGroup, ExpertsThatDoNotSplitFailToLoad) {
  try {
    load_ranked(test::bundled_model_dir(), options(), {.ranks = 3});
    FAIL() << "loaded 8 experts over 3 ranks";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("8 routed experts do not split evenly over 3 ranks"), std::string::npos) << e.what();
  }
  EXPECT_THROW(load_ranked(test::bundled_model_dir(), options(), {.ranks = 0}), Error);
  try {
    load_ranked(test::bundled_model_dir(), options(), {.ranks = 3, .data_parallel = true});
    FAIL() << "loaded 8 experts over 3 data-parallel ranks";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("8 routed experts do not split evenly over 3 ranks"), std::string::npos) << e.what();
    EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace dsv4
