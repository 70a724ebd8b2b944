// The rank group (runtime/rank_group.h) on the CPU, bundled model: rank 0's Runner over 2 and 4
// in-process ranks gives the logits and the drawn tokens of one rank bit for bit — a prefill split in
// pieces (Model::step and Model::forward), a decode batch of two sequences, backend and host draws —
// because the other ranks make each call with 0 tokens; a group whose ranks cannot split the experts
// fails to load with one line.
#include <gtest/gtest.h>

#include <string>

#include "core/error.h"
#include "runtime/rank_group.h"
#include "support/rank_drive.h"
#include "support/test_paths.h"

namespace dsv4 {
namespace {

using test::drive;
using test::Outcome;

BackendOptions options() { return {.capacity = {.max_seqs = 2, .max_ctx = 4096, .max_tokens = 5}}; }

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
