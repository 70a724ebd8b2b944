// Expert parallelism on the CPU (issue 16): N in-process ranks, each holding E/N routed experts and its
// own sequences (attention data-parallel), run the same calls in lockstep (an idle rank runs calls of
// 0 tokens); every sequence's logits equal those of one rank bit for bit: prefill in chunks, decode
// batches of different sizes per rank, one rank with no sequence at all.
#include <gtest/gtest.h>

#include <map>
#include <mutex>
#include <vector>

#include "backend/comm/inprocess_comm.h"
#include "core/error.h"
#include "model/model.h"
#include "support/test_paths.h"

namespace dsv4 {
namespace {

constexpr int kSeqs = 3;
constexpr int64_t kChunk = 7, kDecode = 5;

std::vector<int32_t> ids(int64_t n, int32_t from, int64_t vocab) {
  std::vector<int32_t> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[size_t(i)] = int32_t((from + 53 * i + i * i) % vocab);
  return v;
}

// The logits rows of one sequence in call order: every prefill position, then each decode step.
using Trace = std::map<int, std::vector<std::vector<float>>>;

BackendOptions cpu_options(comm::Communicator* c) {
  return {.numerics = Numerics::Official,
          .capacity = {.max_seqs = kSeqs, .max_ctx = 4096, .max_tokens = 64},
          .comm = c};
}

// Runs the fixed call pattern on `m`: sequence i (prompt of 9 + 4i tokens, fed in chunks of kChunk) on
// rank i % ranks, then kDecode decode batches of every sequence of this rank. Calls that are not this
// rank's run with 0 tokens so every rank makes the same calls.
Trace run_pattern(Model& m, int rank, int ranks) {
  const int64_t V = m.config().vocab_size;
  Trace out;
  auto call = [&](const Batch& b, const std::vector<int>& seq_of_row) {
    const int64_t T = b.size();
    m.step(b, {.head_first = 0, .head_rows = T});
    if (T == 0) return;
    const Tensor l = m.backend().logits(T);
    for (int64_t t = 0; t < T; ++t) out[seq_of_row[size_t(t)]].emplace_back(l.row(t), l.row(t) + V);
  };
  std::vector<int64_t> pos(kSeqs, 0);
  for (int i = 0; i < kSeqs; ++i) {
    const auto prompt = ids(9 + 4 * i, 3 + i, V);
    for (size_t t0 = 0; t0 < prompt.size(); t0 += kChunk) {
      const size_t n = std::min<size_t>(kChunk, prompt.size() - t0);
      Batch b;
      if (i % ranks == rank) {
        b.ids.assign(prompt.begin() + long(t0), prompt.begin() + long(t0 + n));
        for (size_t t = 0; t < n; ++t) b.positions.push_back(int32_t(pos[size_t(i)] + int64_t(t)));
        b.slots.assign(n, i);
        b.run_len = int64_t(n);
        pos[size_t(i)] += int64_t(n);
      }
      call(b, std::vector<int>(n, i));
    }
  }
  for (int64_t s = 0; s < kDecode; ++s) {
    Batch b;
    std::vector<int> rows;
    for (int i = 0; i < kSeqs; ++i) {
      if (i % ranks != rank) continue;
      b.ids.push_back(int32_t((17 * s + 5 * i + 1) % V));
      b.positions.push_back(int32_t(pos[size_t(i)]++));
      b.slots.push_back(i);
      rows.push_back(i);
    }
    b.run_len = 1;
    call(b, rows);
  }
  return out;
}

class ExpertParallel : public ::testing::TestWithParam<std::tuple<const char*, int>> {};

TEST_P(ExpertParallel, RanksGiveOneRanksLogits) {
  const std::string name = std::get<0>(GetParam());
  const int ranks = std::get<1>(GetParam());
  if (name != "bundled" && !test::have_shared()) GTEST_SKIP() << "no ../shared fixtures";
  const std::string dir = name == "bundled" ? test::bundled_model_dir() : test::fixture_dir(name) + "/model";
  auto one = Model::load(dir, cpu_options(nullptr));
  const Trace want = run_pattern(*one, 0, 1);
  ASSERT_EQ(want.size(), size_t(kSeqs));

  comm::InProcessGroup group({.ranks = ranks});
  std::mutex mu;
  Trace got;
  group.run([&](comm::Communicator& c) {
    auto m = Model::load(dir, cpu_options(&c));
    const Trace mine = run_pattern(*m, c.rank(), c.size());
    const std::lock_guard<std::mutex> lock(mu);
    for (const auto& [seq, rows] : mine) got[seq] = rows;
  });
  ASSERT_EQ(got.size(), want.size());
  for (const auto& [seq, rows] : want) {
    ASSERT_EQ(got[seq].size(), rows.size()) << "sequence " << seq;
    for (size_t r = 0; r < rows.size(); ++r) EXPECT_EQ(got[seq][r], rows[r]) << "sequence " << seq << ", row " << r;
  }
}

INSTANTIATE_TEST_SUITE_P(Models, ExpertParallel,
                         ::testing::Combine(::testing::Values("bundled", "tiny-q", "tiny-q-wide"), ::testing::Values(2, 4)),
                         [](const auto& info) {
                           std::string n = std::get<0>(info.param);
                           for (char& ch : n)
                             if (ch == '-') ch = '_';
                           return n + "_" + std::to_string(std::get<1>(info.param)) + "_ranks";
                         });

TEST(ExpertParallelErrors, ExpertsMustSplitEvenly) {
  comm::InProcessGroup group({.ranks = 3});  // 8 experts over 3 ranks
  std::mutex mu;
  std::vector<std::string> errors;
  group.run([&](comm::Communicator& c) {
    try {
      Model::load(test::bundled_model_dir(), cpu_options(&c));
    } catch (const Error& e) {
      const std::lock_guard<std::mutex> lock(mu);
      errors.push_back(e.what());
    }
  });
  ASSERT_EQ(errors.size(), 3u);
  EXPECT_NE(errors[0].find("do not split evenly over 3 ranks"), std::string::npos) << errors[0];
}

}  // namespace
}  // namespace dsv4
