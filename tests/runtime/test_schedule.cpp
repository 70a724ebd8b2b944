// The scheduler's decisions without a model: what a step runs (decodes first, prefill on a fixed grid,
// room kept for a waiting prefill, decodes taking turns) and the cache pool's admission arithmetic.
#include <gtest/gtest.h>

#include <sstream>

#include "core/error.h"
#include "runtime/engine_schedule.h"

namespace dsv4 {
namespace {

std::string show(const std::vector<StepItem>& plan) {
  std::ostringstream s;
  for (const StepItem& it : plan) {
    if (it.decode)
      s << 'd' << it.seq << ' ';
    else
      s << 'p' << it.seq << '[' << it.begin << ',' << it.end << ") ";
  }
  return s.str();
}

int64_t tokens(const std::vector<StepItem>& plan) {
  int64_t n = 0;
  for (const StepItem& it : plan) n += it.tokens();
  return n;
}

TEST(PlanStep, DecodesFirstThenPrefillOnTheGrid) {
  // seq 0 decodes, seq 1 has 20 of 50 prompt tokens, seq 2 has a 10-token prompt.
  std::vector<SeqDemand> seqs = {{5, 5}, {50, 20}, {10, 0}};
  auto plan = plan_step(seqs, {32, 16}, 0);
  // Grid of 16: seq 1 continues with [20, 32) (cut at the grid, not at its start), [32, 48) and
  // [48, 50); seq 2's first chunk no longer fits.
  EXPECT_EQ(show(plan), "d0 p1[20,32) p1[32,48) p1[48,50) ");
  EXPECT_EQ(tokens(plan), 1 + 12 + 16 + 2);
}

// A sequence's own cuts (the prefix cache's snapshot points) end chunks too; the grid stays.
TEST(PlanStep, ChunksAlsoEndAtTheSequencesCuts) {
  const std::vector<int64_t> cuts = {128, 256};
  // A prompt of 300 restored at 100 (not on the grid of 96): [100, 128) cut, [128, 192) grid,
  // [192, 256) cut, [256, 288) grid, [288, 300).
  std::vector<SeqDemand> seqs = {{.prompt_len = 300, .prefilled = 100, .cuts = &cuts}, {40, 0}};
  EXPECT_EQ(show(plan_step(seqs, {512, 96}, 0)), "p0[100,128) p0[128,192) p0[192,256) p0[256,288) p0[288,300) p1[0,40) ");
  // Behind decodes on a grid of 40: [120, 128) ends at the cut, [128, 160) no longer fits.
  seqs = {{5, 5}, {5, 5}, {.prompt_len = 300, .prefilled = 120, .cuts = &cuts}};
  EXPECT_EQ(show(plan_step(seqs, {40, 40}, 0)), "d0 d1 p2[120,128) ");
  // No cuts: the grid alone.
  seqs = {{.prompt_len = 300, .prefilled = 100}};
  EXPECT_EQ(show(plan_step(seqs, {512, 96}, 0)), "p0[100,192) p0[192,288) p0[288,300) ");
}

TEST(PlanStep, ChunksDoNotDependOnTheBudgetLeft) {
  std::vector<SeqDemand> alone = {{40, 0}};
  std::vector<SeqDemand> crowded = {{3, 3}, {3, 3}, {3, 3}, {40, 0}};
  for (uint64_t step = 0; step < 3; ++step) {
    std::vector<SeqDemand> a = alone, c = crowded;
    std::vector<std::pair<int64_t, int64_t>> cuts_a, cuts_c;
    for (int round = 0; round < 10 && (!a[0].decoding() || !c[3].decoding()); ++round) {
      for (const StepItem& it : plan_step(a, {20, 8}, step + round))
        if (!it.decode) cuts_a.push_back({it.begin, it.end}), a[0].prefilled = it.end;
      for (const StepItem& it : plan_step(c, {20, 8}, step + round))
        if (!it.decode) cuts_c.push_back({it.begin, it.end}), c[3].prefilled = it.end;
    }
    EXPECT_EQ(cuts_a, cuts_c);  // the same forward chunks, whoever else runs
    EXPECT_EQ(cuts_a.front(), (std::pair<int64_t, int64_t>{0, 8}));
  }
}

TEST(PlanStep, WaitingPrefillAlwaysProgresses) {
  // 10 decoders fill a budget of 10; the prefill still gets its chunk of 4, so 6 decoders run.
  std::vector<SeqDemand> seqs(10, SeqDemand{1, 1});
  seqs.push_back({100, 0});
  auto plan = plan_step(seqs, {10, 4}, 0);
  EXPECT_EQ(tokens(plan), 10);
  ASSERT_FALSE(plan.empty());
  EXPECT_FALSE(plan.back().decode);
  EXPECT_EQ(plan.back().end - plan.back().begin, 4);
}

TEST(PlanStep, DecodersTakeTurnsWhenOverBudget) {
  std::vector<SeqDemand> seqs(5, SeqDemand{1, 1});
  std::vector<int> runs(5, 0);
  for (uint64_t step = 0; step < 10; ++step) {
    auto plan = plan_step(seqs, {2, 2}, step);
    EXPECT_EQ(plan.size(), 2u);
    for (const StepItem& it : plan) ++runs[it.seq];
  }
  for (int r : runs) EXPECT_EQ(r, 4);  // 20 decode slots shared evenly
}

TEST(PlanStep, LaterPrefillDoesNotOvertake) {
  std::vector<SeqDemand> seqs = {{100, 0}, {4, 0}};
  auto plan = plan_step(seqs, {10, 8}, 0);
  EXPECT_EQ(show(plan), "p0[0,8) ");  // [8,16) does not fit; seq 1 waits its turn
}

TEST(PlanStep, BudgetOfOne) {
  std::vector<SeqDemand> seqs = {{1, 1}, {3, 0}};
  EXPECT_EQ(show(plan_step(seqs, {1, 128}, 0)), "p1[0,1) ");
  seqs[1].prefilled = 3;
  EXPECT_EQ(show(plan_step(seqs, {1, 128}, 0)), "d0 ");
  EXPECT_EQ(show(plan_step(seqs, {1, 128}, 1)), "d1 ");
}

TEST(CachePool, ReservesWholePagesAndReleases) {
  CachePool pool(1000, 128);  // 7 whole pages
  EXPECT_EQ(pool.total_pages(), 7);
  EXPECT_EQ(pool.pages_for(1), 1);
  EXPECT_EQ(pool.pages_for(128), 1);
  EXPECT_EQ(pool.pages_for(129), 2);
  EXPECT_TRUE(pool.try_reserve(5));
  EXPECT_FALSE(pool.try_reserve(3));
  EXPECT_EQ(pool.used_pages(), 5);
  EXPECT_TRUE(pool.try_reserve(2));
  pool.release(7);
  EXPECT_EQ(pool.used_pages(), 0);
  EXPECT_THROW(CachePool(10, 128), Error);
}

// Placement over data-parallel ranks (held, slots, hit): the longest cached prefix among the ranks at
// most max(1, slots / 4) sequences above the least loaded; ties by load, then rank; -1 when all are full.
TEST(PlaceSequence, LongestHitWithinTheLoadSlack) {
  using R = RankRoom;
  // No hit anywhere: the least loaded, the lowest on a tie.
  EXPECT_EQ(place_sequence({R{0, 4, 0}, R{0, 4, 0}}), 0);
  EXPECT_EQ(place_sequence({R{2, 4, 0}, R{1, 4, 0}}), 1);
  // A hit on a rank one sequence busier (slack 1 of 4 slots) wins; two busier loses.
  EXPECT_EQ(place_sequence({R{1, 4, 256}, R{0, 4, 0}}), 0);
  EXPECT_EQ(place_sequence({R{2, 4, 256}, R{0, 4, 0}}), 1);
  // 16 slots: a slack of 4.
  EXPECT_EQ(place_sequence({R{4, 16, 0}, R{8, 16, 128}}), 1);
  EXPECT_EQ(place_sequence({R{4, 16, 0}, R{9, 16, 128}}), 0);
  // The longer of two hits; equal hits: the less loaded.
  EXPECT_EQ(place_sequence({R{0, 4, 128}, R{0, 4, 384}, R{1, 4, 256}}), 1);
  EXPECT_EQ(place_sequence({R{1, 4, 256}, R{0, 4, 256}}), 1);
  // A full rank takes nothing, however long its hit; the least loaded is over the ranks with room.
  EXPECT_EQ(place_sequence({R{4, 4, 1024}, R{3, 4, 0}, R{3, 4, 128}}), 2);
  EXPECT_EQ(place_sequence({R{2, 2, 0}, R{2, 2, 0}}), -1);
  EXPECT_EQ(place_sequence({}), -1);
}

}  // namespace
}  // namespace dsv4
