// The expert split of a rank group and the dispatch plan both backends' expert-parallel MoE use
// (backend/comm/expert_range.h), against hand-worked cases.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "backend/comm/expert_range.h"
#include "backend/comm/inprocess_comm.h"
#include "core/error.h"

namespace dsv4 {
namespace {

TEST(ExpertRange, RanksHoldEqualShares) {
  EXPECT_EQ(expert_range(8, nullptr).count(8), 8);
  comm::InProcessGroup g({.ranks = 4});
  const ExpertRange r = expert_range(8, &g.rank(2));
  EXPECT_EQ(r.first, 4);
  EXPECT_EQ(r.last, 6);
  EXPECT_TRUE(r.holds(5));
  EXPECT_FALSE(r.holds(6));
  comm::InProcessGroup three({.ranks = 3});
  EXPECT_THROW(expert_range(8, &three.rank(0)), Error);
}

// Entries of 3 tokens x 2 picks over 2 ranks of 4 experts each: experts 5 1 | 0 6 | 7 3.
TEST(ExpertRange, DispatchGroupsByRankInEntryOrder) {
  const std::vector<int32_t> experts = {5, 1, 0, 6, 7, 3};
  const ExpertDispatch d = plan_dispatch(experts, 4, 2);
  EXPECT_EQ(d.send_n, (std::vector<size_t>{3, 3}));
  EXPECT_EQ(d.order, (std::vector<int32_t>{1, 2, 5, 0, 3, 4}));  // rank 0: 1, 0, 3; rank 1: 5, 6, 7
  EXPECT_EQ(d.entry_row, (std::vector<int32_t>{3, 0, 1, 4, 5, 2}));
  EXPECT_TRUE(plan_dispatch({}, 4, 2).order.empty());
  try {
    plan_dispatch(std::vector<int32_t>{2, 8}, 4, 2);
    FAIL() << "expert 8 of 8 accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("expert id 8 outside [0, 8)"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace dsv4
