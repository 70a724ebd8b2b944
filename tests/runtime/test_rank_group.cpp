// The rank group (runtime/rank_group.h) on the CPU, bundled model: rank 0's Runner over 2 and 4
// in-process ranks gives the logits and the drawn tokens of one rank bit for bit — a prefill split in
// pieces (Model::step and Model::forward), a decode batch of two sequences, backend and host draws —
// because the other ranks make each call with 0 tokens; a group whose ranks cannot split the experts
// fails to load with one line; a TCP group's other ranks wait for rank 0's next call beyond the timeout.
#include <gtest/gtest.h>

#include <chrono>
#include <future>
#include <string>
#include <thread>
#include <vector>

#include "core/error.h"
#include "runtime/rank_group.h"
#include "support/free_port.h"
#include "support/rank_drive.h"
#include "support/test_paths.h"

namespace dsv4 {
namespace {

using test::drive;
using test::Outcome;
using namespace std::chrono_literals;

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

// Runner::together over 2 data-parallel ranks whose call sequences differ (rank 0: main, MTP, main; rank
// 1: MTP, MTP): one schedule of 4 steps (main: rank 1 idles; MTP: both; main: rank 1 idles; MTP: rank 0,
// done, idles), and every call's logits are those of the same calls on one rank, bit for bit.
TEST(RankGroup, TogetherPairsTheRanksCallsIntoOneSchedule) {
  const BackendOptions o{.capacity = {.max_seqs = 2, .max_ctx = 4096, .max_tokens = 8}};
  const auto one = load_ranked(test::bundled_model_dir(), o, {.ranks = 1});
  const auto group = load_ranked(test::bundled_model_dir(), o, {.ranks = 2, .data_parallel = true});
  ASSERT_GE(one->model().num_mtp(), 1);
  const ModelConfig& cfg = one->config();
  struct Call {
    bool mtp;
    std::vector<int32_t> ids;
  };
  const std::vector<std::vector<Call>> script = {{{false, {5, 9, 14}}, {true, {3, 8}}, {false, {21}}},
                                                 {{true, {7, 2, 11}}, {true, {4}}}};
  // Rank r's calls on `m` in slot `slot`, from position 0 (main and MTP positions counted apart).
  auto play = [&](Model& m, int slot, const std::vector<Call>& calls) {
    std::vector<std::vector<float>> out;
    int64_t pos = 0, mtp_pos = 0;
    for (const Call& c : calls) {
      const int64_t T = int64_t(c.ids.size());
      if (c.mtp) {
        Tensor S({T, cfg.hc_mult, cfg.hidden_size});
        for (size_t i = 0; i < S.data.size(); ++i) S.data[i] = float(int(i % 7) - 3) * 0.25f;
        out.push_back(m.forward_mtp(slot, mtp_pos, S, c.ids, 0).data);
        mtp_pos += T;
      } else {
        out.push_back(m.forward(slot, pos, c.ids).data);
        pos += T;
      }
    }
    return out;
  };
  std::vector<std::vector<std::vector<float>>> want;
  for (const auto& calls : script) {
    const int slot = one->new_sequence();
    want.push_back(play(one->model(), slot, calls));
  }
  const int s0 = group->new_sequence(0), s1 = group->new_sequence(1);
  const int local[2] = {group->local_slot(s0), group->local_slot(s1)};
  std::vector<std::vector<std::vector<float>>> got(2);
  const int64_t steps = group->together([&](int r, Runner& x) { got[size_t(r)] = play(x.model(), local[r], script[size_t(r)]); });
  EXPECT_EQ(steps, 4);
  EXPECT_EQ(got, want);
  // Ranks with no calls at all, and one rank alone: no step, or its own calls only.
  EXPECT_EQ(group->together([](int, Runner&) {}), 0);
  EXPECT_EQ(group->together([&](int r, Runner& x) {
              if (r == 1) x.model().forward(local[1], 0, {6});
            }),
            1);
}

// Calls through a prefix of the layers (StepPlan::layers: `dsv4 bench`'s embedding + head step, a
// checkpoint timed on its first layers) are announced with their layer count: the other ranks run the
// same layers, so the collectives keep pairing -- the logits of each call, and of a full call after them,
// are one rank's bit for bit.
TEST(RankGroup, PrefixCallsKeepTheRanksPaired) {
  const BackendOptions o{.capacity = {.max_seqs = 1, .max_ctx = 4096, .max_tokens = 8}};
  auto calls = [](Runner& r) {
    Model& m = r.model();
    const int slot = r.new_sequence();
    std::vector<float> out;
    auto step = [&](int64_t pos, std::vector<int32_t> ids, int64_t layers) {
      Batch b;
      b.ids = ids;
      for (size_t t = 0; t < ids.size(); ++t) {
        b.positions.push_back(int32_t(pos + int64_t(t)));
        b.slots.push_back(slot);
      }
      b.run_len = b.size();
      m.step(b, {.layers = layers, .head_first = 0, .head_rows = b.size()});
      const Tensor l = m.backend().logits(b.size());
      out.insert(out.end(), l.data.begin(), l.data.end());
    };
    step(0, {3, 17, 29}, 0);   // embedding + head
    step(0, {3, 17, 29}, 2);   // the first two layers
    step(0, {3, 17, 29, 41}, -1);  // every layer
    return out;
  };
  const auto one = load_ranked(test::bundled_model_dir(), o, {.ranks = 1});
  const std::vector<float> want = calls(*one);
  const auto group = load_ranked(test::bundled_model_dir(), o, {.ranks = 2});
  EXPECT_EQ(calls(*group), want);
}

// A TCP group of two ranks (threads of this process on 127.0.0.1, a 2 s timeout): rank 0 sits idle 5 s
// between two calls, as a chat's user between turns; rank 1 waits for the next call without a limit and
// makes it, so both calls give one rank's logits bit for bit. When rank 0's runner goes, rank 1 stops
// (load_ranked returns null) without an error. (Before: rank 1 gave up after 2 s.)
TEST(RankGroup, TcpRanksWaitForRank0sNextCallBeyondTheTimeout) {
  const BackendOptions o{.capacity = {.max_seqs = 1, .max_ctx = 4096, .max_tokens = 8}};
  auto calls = [](Runner& r, std::chrono::milliseconds idle) {
    const int slot = r.new_sequence();
    std::vector<float> out = r.model().forward(slot, 0, {3, 17, 29}).data;
    std::this_thread::sleep_for(idle);
    const Tensor next = r.model().forward(slot, 3, {41});
    out.insert(out.end(), next.data.begin(), next.data.end());
    return out;
  };
  const std::vector<float> want = calls(*load_ranked(test::bundled_model_dir(), o, {.ranks = 1}), 0ms);
  const int port = test::free_port();
  ASSERT_GT(port, 0);
  auto spec = [port](int rank) {
    return RankSpec{.tcp = comm::Rendezvous{
                        .master_addr = "127.0.0.1", .master_port = port, .rank = rank, .world_size = 2, .timeout = 2s}};
  };
  auto rank1 = std::async(std::launch::async, [&] {
    try {
      return load_ranked(test::bundled_model_dir(), o, spec(1)) ? std::string("rank 1 got a runner") : std::string();
    } catch (const std::exception& e) {
      return std::string(e.what());
    }
  });
  std::vector<float> got;
  try {
    got = calls(*load_ranked(test::bundled_model_dir(), o, spec(0)), 5s);
  } catch (const std::exception& e) {
    ADD_FAILURE() << "rank 0: " << e.what();
  }
  EXPECT_EQ(rank1.get(), "");
  EXPECT_EQ(got, want);
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
