// together_over (runtime/rank_schedule.h) on the CPU, bundled model: two ranks, each a thread with its own
// Model (half the routed experts) and its in-process host communicator, as two processes would be. Ranks
// with different call sequences (main and MTP calls of different lengths) pair into Runner::together's
// schedule, and every call's logits are those of the same calls on one rank, bit for bit; no calls make no
// step; a rank whose work fails idles through the others' steps and gets its failure back.
#include <gtest/gtest.h>

#include <memory>
#include <stdexcept>
#include <vector>

#include "backend/comm/inprocess_comm.h"
#include "runtime/rank_group.h"
#include "runtime/rank_schedule.h"
#include "runtime/runner.h"
#include "support/test_paths.h"

namespace dsv4 {
namespace {

BackendOptions options() { return {.capacity = {.max_seqs = 2, .max_ctx = 4096, .max_tokens = 8}}; }

struct Call {
  bool mtp;
  std::vector<int32_t> ids;
};
using Logits = std::vector<std::vector<float>>;

// The calls on `m` in `slot`, from position 0 (main and MTP positions counted apart); each call's logits.
Logits play(Model& m, int slot, const std::vector<Call>& calls) {
  const ModelConfig& cfg = m.config();
  Logits out;
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
}

// Each rank's model over a group of `ranks` in-process communicators; fn(r, comm, model) on rank r's
// thread (the models load on their threads: their collectives pair as they would across processes).
void on_ranks(int ranks, const std::function<void(int r, comm::HostCommunicator& c, Model& m)>& fn) {
  comm::InProcessGroup group({.ranks = ranks});
  group.run([&](comm::HostCommunicator& c) {
    BackendOptions o = options();
    o.comm = &c;
    const std::unique_ptr<Model> m = Model::load(test::bundled_model_dir(), o);
    fn(c.rank(), c, *m);
  });
}

TEST(RankSchedule, PairsTheRanksCallsAsTogetherDoes) {
  const std::vector<std::vector<Call>> script = {{{false, {5, 9, 14}}, {true, {3, 8}}, {false, {21}}},
                                                 {{true, {7, 2, 11}}, {true, {4}}}};
  const auto one = Runner::load(test::bundled_model_dir(), options());
  ASSERT_GE(one->model().num_mtp(), 1);
  std::vector<Logits> want;
  for (const auto& calls : script) want.push_back(play(one->model(), one->new_sequence(), calls));
  // The in-process ranks' schedule (Runner::together) for the same script: 4 steps.
  const auto group = load_ranked(test::bundled_model_dir(), options(), {.ranks = 2, .data_parallel = true});
  const int s0 = group->new_sequence(0), s1 = group->new_sequence(1);
  const int local[2] = {group->local_slot(s0), group->local_slot(s1)};
  const int64_t together_steps =
      group->together([&](int r, Runner& x) { (void)play(x.model(), local[r], script[size_t(r)]); });
  ASSERT_EQ(together_steps, 4);

  std::vector<Logits> got(2);
  std::vector<int64_t> steps(2, -1);
  on_ranks(2, [&](int r, comm::HostCommunicator& c, Model& m) {
    steps[size_t(r)] = together_over(c, m, [&] { got[size_t(r)] = play(m, 0, script[size_t(r)]); });
  });
  EXPECT_EQ(steps, std::vector<int64_t>(2, together_steps));
  EXPECT_EQ(got, want);
}

TEST(RankSchedule, NoCallsNoStepAndOneRanksCallsAlone) {
  std::vector<int64_t> none(2, -1), alone(2, -1);
  std::vector<float> logits;
  on_ranks(2, [&](int r, comm::HostCommunicator& c, Model& m) {
    none[size_t(r)] = together_over(c, m, [] {});
    alone[size_t(r)] = together_over(c, m, [&] {
      if (r == 1) logits = m.forward(0, 0, {6}).data;
    });
  });
  EXPECT_EQ(none, std::vector<int64_t>(2, 0));
  EXPECT_EQ(alone, std::vector<int64_t>(2, 1));
  const auto one = Runner::load(test::bundled_model_dir(), options());
  EXPECT_EQ(logits, one->model().forward(one->new_sequence(), 0, {6}).data);
}

// Rank 1 fails after its first call: it idles through rank 0's remaining calls (whose logits stay one
// rank's) and gets its own failure back; the model's call hook is cleared after.
TEST(RankSchedule, AFailedRankIdlesThroughTheOthersSteps) {
  const std::vector<Call> calls0 = {{false, {5, 9}}, {false, {14}}, {false, {21, 3}}};
  const auto one = Runner::load(test::bundled_model_dir(), options());
  const Logits want = play(one->model(), one->new_sequence(), calls0);
  Logits got;
  std::vector<std::string> errors(2);
  std::vector<int64_t> steps(2, -1);
  on_ranks(2, [&](int r, comm::HostCommunicator& c, Model& m) {
    try {
      steps[size_t(r)] = together_over(c, m, [&] {
        if (r == 0) {
          got = play(m, 0, calls0);
        } else {
          (void)m.forward(0, 0, {7});
          throw std::runtime_error("rank 1 gave up");
        }
      });
    } catch (const std::exception& e) {
      errors[size_t(r)] = e.what();
    }
    // The hooks are gone: a plain call on rank 1 pairs with an idle call on rank 0 (a hook left behind
    // would post into rank 0's MoE collectives instead).
    if (r == 1)
      (void)m.forward(1, 0, {8});
    else
      m.idle({});
  });
  EXPECT_EQ(got, want);
  EXPECT_EQ(errors[0], "");
  EXPECT_EQ(errors[1], "rank 1 gave up");
  EXPECT_EQ(steps[0], 3);  // both ranks' first calls (the same kind), then rank 0's two with rank 1 idling
}

}  // namespace
}  // namespace dsv4
