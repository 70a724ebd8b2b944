// The rank group on the CUDA backend (issue 16, backend/cuda/moe_ranks.h), bundled model; skipped
// without a Hopper GPU. 2 and 4 in-process ranks share the one GPU (each its own CudaBackend holding
// its share of the routed experts; the host communicator, its rows staged through pinned copies) and
// make the calls of tests/support/rank_drive.h:
//   - expert parallel, exact tier: rank 0's logits and drawn ids are one rank's bit for bit (one rank
//     decodes through CUDA graphs, the group through plain launches: the same kernels);
//   - data parallel (each rank its own sequences), exact tier: the same bits;
//   - fast tier: the group's logits within the fast tier's model tolerance (rel-L2 0.02) of one rank's;
//   - a device communicator (NCCL, one rank: the most one GPU takes) given to the backend: the
//     exchange's device paths, one rank's bits;
//   - speculative decoding over 2 ranks (the MTP block's calls mirrored): plain greedy ids.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <string>

#include "backend/comm/inprocess_comm.h"
#include "model/golden.h"
#include "runtime/rank_group.h"
#include "runtime/runner.h"
#include "runtime/speculative.h"
#include "support/rank_drive.h"
#include "support/test_paths.h"
#if DSV4_HAVE_NCCL
#include "backend/comm/nccl_comm.h"
#endif

namespace dsv4 {
namespace {

BackendOptions cuda_options(KernelTier tier) {
  return {.device = Device::Cuda, .kernels = tier, .capacity = {.max_seqs = 2, .max_ctx = 4096, .max_tokens = 5}};
}

double rel_l2(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() ? test::rel_l2(a.data(), b.data(), a.size()) : INFINITY;
}

TEST(RankGroupCuda, ExpertParallelRanksGiveOneRanksBits) {
  if (!Runner::cuda_available()) GTEST_SKIP() << "no Hopper GPU";
  const auto one = load_ranked(test::bundled_model_dir(), cuda_options(KernelTier::Exact), {.ranks = 1});
  const test::Outcome want = test::drive(*one);
  ASSERT_EQ(want.ids.size(), 8u);
  for (int n : {2, 4}) {
    const auto group = load_ranked(test::bundled_model_dir(), cuda_options(KernelTier::Exact), {.ranks = n});
    ASSERT_NE(group, nullptr);
    const test::Outcome got = test::drive(*group);
    EXPECT_TRUE(got == want) << n << " ranks: ids " << ::testing::PrintToString(got.ids) << ", one rank's "
                             << ::testing::PrintToString(want.ids) << ", logits rel-L2 " << rel_l2(got.logits, want.logits);
  }
}

TEST(RankGroupCuda, DataParallelRanksGiveOneRanksBits) {
  if (!Runner::cuda_available()) GTEST_SKIP() << "no Hopper GPU";
  const auto one = load_ranked(test::bundled_model_dir(), cuda_options(KernelTier::Exact), {.ranks = 1});
  const test::Outcome want = test::drive(*one);
  const auto group =
      load_ranked(test::bundled_model_dir(), cuda_options(KernelTier::Exact), {.ranks = 2, .data_parallel = true});
  ASSERT_EQ(group->ranks(), 2);
  const test::Outcome got = test::drive(*group);
  EXPECT_TRUE(got == want) << "ids " << ::testing::PrintToString(got.ids) << ", one rank's "
                           << ::testing::PrintToString(want.ids) << ", logits rel-L2 " << rel_l2(got.logits, want.logits);
  EXPECT_EQ(group->rank_of(1), 1) << "B ran on rank 1";
}

// Speculative decoding over an expert-parallel group on the GPU: the MTP block's calls are mirrored by
// idle ranks (0 tokens, the MTP layer's exchange only); greedy ids are those of one rank's decoder.
TEST(RankGroupCuda, SpeculativeDecodingOverRanksGivesOneRanksIds) {
  if (!Runner::cuda_available()) GTEST_SKIP() << "no Hopper GPU";
  BackendOptions o = cuda_options(KernelTier::Exact);
  o.capacity.max_tokens = 8;
  const std::vector<int32_t> prompt = {1, 5, 9, 33, 2, 7, 100, 4, 8, 3, 11};
  std::vector<int32_t> want;
  {
    const auto one = load_ranked(test::bundled_model_dir(), o, {.ranks = 1});
    if (one->model().num_mtp() < 1) GTEST_SKIP() << "the CUDA backend holds no MTP block";
    want = SpeculativeDecoder(one->model(), one->new_sequence(), {.drafts = 1}).generate(prompt, 12);
  }
  ASSERT_EQ(want.size(), 12u);
  const auto group = load_ranked(test::bundled_model_dir(), o, {.ranks = 2});
  for (int64_t k : {1, 2}) {
    const int slot = group->new_sequence();
    EXPECT_EQ(SpeculativeDecoder(group->model(), slot, {.drafts = k}).generate(prompt, 12), want) << "k " << k;
    group->release(slot);
  }
}

TEST(RankGroupCuda, FastTierRanksStayWithinTheModelTolerance) {
  if (!Runner::cuda_available()) GTEST_SKIP() << "no Hopper GPU";
  const auto one = load_ranked(test::bundled_model_dir(), cuda_options(KernelTier::Fast), {.ranks = 1});
  const test::Outcome want = test::drive(*one);
  const auto group = load_ranked(test::bundled_model_dir(), cuda_options(KernelTier::Fast), {.ranks = 2});
  const test::Outcome got = test::drive(*group);
  ASSERT_EQ(got.logits.size(), want.logits.size());
  const double d = rel_l2(got.logits, want.logits);
  EXPECT_LE(d, 0.02) << "2 ranks against one, fast tier";
  std::printf("fast tier, 2 ranks vs 1: logits rel-L2 %.3g, ids %s\n", d, got.ids == want.ids ? "equal" : "differ");
}

TEST(RankGroupCuda, DeviceCommunicatorGivesOneRanksBits) {
  if (!Runner::cuda_available()) GTEST_SKIP() << "no Hopper GPU";
#if DSV4_HAVE_NCCL
  Runner plain(Model::load(test::bundled_model_dir(), cuda_options(KernelTier::Exact)));
  const test::Outcome want = test::drive(plain);
  comm::InProcessGroup bootstrap({.ranks = 1});
  const std::unique_ptr<comm::Communicator> nccl = comm::connect_nccl(bootstrap.rank(0), {.device = 0});
  BackendOptions o = cuda_options(KernelTier::Exact);
  o.comm = nccl.get();
  Runner ranked(Model::load(test::bundled_model_dir(), o));
  const test::Outcome got = test::drive(ranked);
  EXPECT_TRUE(got == want) << "ids " << ::testing::PrintToString(got.ids) << ", plain "
                           << ::testing::PrintToString(want.ids) << ", logits rel-L2 " << rel_l2(got.logits, want.logits);
#else
  GTEST_SKIP() << "built without NCCL";
#endif
}

}  // namespace
}  // namespace dsv4
