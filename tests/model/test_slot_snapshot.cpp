// Backend::snapshot / restore through the model (backend/backend.h): a slot restored from a snapshot
// continues exactly as the snapshotted sequence (logits bit for bit), in another slot or in the same
// slot after it ran ahead (a rollback); snapshots are independent copies.
#include <gtest/gtest.h>

#include <numeric>
#include <vector>

#include "core/error.h"
#include "model/model.h"
#include "support/test_paths.h"

namespace dsv4 {
namespace {

std::vector<int32_t> ids(int64_t n, int32_t from, int64_t vocab) {
  std::vector<int32_t> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[size_t(i)] = int32_t((from + 37 * i) % vocab);
  return v;
}

class SlotSnapshot : public ::testing::TestWithParam<const char*> {
 protected:
  void SetUp() override {
    const std::string name = GetParam();
    if (name != "bundled" && !test::have_shared()) GTEST_SKIP() << "no ../shared fixtures";
    dir_ = name == "bundled" ? test::bundled_model_dir() : test::fixture_dir(name) + "/model";
    m_ = Model::load(dir_, Numerics::Official);
  }
  std::string dir_;
  std::unique_ptr<Model> m_;
};

// A prefix of 128 tokens (both compress ratios divide it), then a continuation of `more` tokens fed in
// two chunks and one token at a time.
TEST_P(SlotSnapshot, RestoredSlotContinuesBitForBit) {
  const int64_t V = m_->config().vocab_size;
  const auto prefix = ids(128, 5, V), more = ids(70, 11, V);
  Backend& be = m_->backend();
  Sequence a(*m_, 0);
  a.forward(prefix, {.all_logits = false});
  const auto snap = be.snapshot(0, a.pos(), 0);
  EXPECT_EQ(snap->pos, 128);
  EXPECT_GT(snap->bytes(), 0u);
  const Tensor cold = a.forward(more);

  // Another slot, restored, fed the same continuation in different chunks.
  be.restore(3, *snap);
  Tensor warm({int64_t(more.size()), V});
  m_->forward(3, 128, std::vector<int32_t>(more.begin(), more.begin() + 40)).data.swap(warm.data);
  warm.data.resize(size_t(70 * V));
  int64_t p = 168;
  for (size_t i = 40; i < more.size(); ++i, ++p) {
    const Tensor l = m_->forward(3, p, {more[i]});
    std::copy(l.data.begin(), l.data.end(), warm.row(int64_t(i)));
  }
  EXPECT_EQ(warm.data, cold.data);

  // The same slot after it ran ahead: a rollback to the snapshot gives the cold continuation again.
  m_->forward(0, 198, ids(30, 3, V));
  be.restore(0, *snap);
  EXPECT_EQ(m_->forward(0, 128, more).data, cold.data);
}

// A snapshot is a copy: the slot it came from moving on does not change it.
TEST_P(SlotSnapshot, SnapshotIsACopy) {
  const int64_t V = m_->config().vocab_size;
  Backend& be = m_->backend();
  m_->forward(1, 0, ids(128, 2, V), {.all_logits = false});
  const auto snap = be.snapshot(1, 128, 0);
  const Tensor first = m_->forward(1, 128, ids(9, 4, V));
  m_->forward(1, 137, ids(50, 6, V));  // slot 1 moves on
  be.restore(2, *snap);
  EXPECT_EQ(m_->forward(2, 128, ids(9, 4, V)).data, first.data);
}

TEST_P(SlotSnapshot, BadSlotsAreOneLineErrors) {
  Backend& be = m_->backend();
  EXPECT_THROW(be.snapshot(-1, 0, 0), Error);
  const auto snap = be.snapshot(0, 0, 0);
  EXPECT_THROW(be.restore(-2, *snap), Error);
}

INSTANTIATE_TEST_SUITE_P(Models, SlotSnapshot, ::testing::Values("bundled", "tiny-q"),
                         [](const auto& info) { return std::string(info.param) == "tiny-q" ? "tiny_q" : "bundled"; });

}  // namespace
}  // namespace dsv4
