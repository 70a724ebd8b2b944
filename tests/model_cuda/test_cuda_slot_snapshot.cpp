// CudaBackend::snapshot / restore through the model (backend/backend.h; the CPU backend's test is
// tests/model/test_slot_snapshot.cpp): a slot restored from a snapshot continues exactly as the
// snapshotted sequence (logits bit for bit), in another slot or in the same slot after it ran ahead;
// snapshots are independent copies; bad slots and foreign snapshots are one-line errors.
#include <gtest/gtest.h>

#include <filesystem>
#include <vector>

#include "backend/cuda/harness.h"
#include "core/error.h"
#include "model/golden.h"
#include "model_steps.h"
#include "support/test_paths.h"

namespace dsv4 {
namespace {

std::vector<int32_t> ids(int64_t n, int32_t from, int64_t vocab) {
  std::vector<int32_t> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[size_t(i)] = int32_t((from + 37 * i) % vocab);
  return v;
}

class CudaSlotSnapshot : public ::testing::TestWithParam<const char*> {
 protected:
  void SetUp() override {
    DSV4_REQUIRE_HOPPER();
    const std::string name = GetParam();
    dir_ = name == "bundled" ? test::bundled_model_dir() : test::fixture_dir(name) + "/model";
    if (!std::filesystem::exists(dir_)) GTEST_SKIP() << "no fixture " << dir_;
    m_ = test::load_cuda(dir_, KernelTier::Exact, 256, 128, 4);
  }
  std::string dir_;
  std::unique_ptr<Model> m_;
};

// A prefix of 128 tokens (both compress ratios divide it), then a continuation of 70 tokens fed in two
// chunks and one token at a time (decode graphs).
TEST_P(CudaSlotSnapshot, RestoredSlotContinuesBitForBit) {
  const int64_t V = m_->config().vocab_size;
  const auto prefix = ids(128, 5, V), more = ids(70, 11, V);
  Backend& be = m_->backend();
  Sequence a(*m_, 0);
  a.forward(prefix, {.all_logits = false});
  const auto snap = be.snapshot(0, a.pos(), 0);
  EXPECT_EQ(snap->pos, 128);
  EXPECT_GT(snap->bytes(), 0u);
  const Tensor cold = a.forward(more);

  be.restore(3, *snap);
  Tensor warm({int64_t(more.size()), V});
  const Tensor first = m_->forward(3, 128, std::vector<int32_t>(more.begin(), more.begin() + 40));
  std::copy(first.data.begin(), first.data.end(), warm.row(0));
  for (size_t i = 40; i < more.size(); ++i) {
    const Tensor l = test::decode_step(*m_, more[i], 128 + int64_t(i), 3);
    std::copy(l.data.begin(), l.data.end(), warm.row(int64_t(i)));
  }
  cuda::test::compare("restored slot vs the snapshotted sequence", warm.data, cold.data, cuda::test::Tol::Exact);

  // The same slot after it ran ahead: a rollback to the snapshot gives the cold continuation again.
  m_->forward(0, 198, ids(30, 3, V));
  be.restore(0, *snap);
  cuda::test::compare("rolled-back slot", m_->forward(0, 128, more).data, cold.data, cuda::test::Tol::Exact);
}

// A snapshot is a copy: the slot it came from moving on does not change it.
TEST_P(CudaSlotSnapshot, SnapshotIsACopy) {
  const int64_t V = m_->config().vocab_size;
  Backend& be = m_->backend();
  m_->forward(1, 0, ids(128, 2, V), {.all_logits = false});
  const auto snap = be.snapshot(1, 128, 0);
  const Tensor first = m_->forward(1, 128, ids(9, 4, V));
  m_->forward(1, 137, ids(50, 6, V));  // slot 1 moves on
  be.restore(2, *snap);
  cuda::test::compare("restored copy", m_->forward(2, 128, ids(9, 4, V)).data, first.data, cuda::test::Tol::Exact);
}

TEST_P(CudaSlotSnapshot, BadSlotsAreOneLineErrors) {
  Backend& be = m_->backend();
  EXPECT_THROW(be.snapshot(-1, 0, 0), Error);
  EXPECT_THROW(be.snapshot(4, 0, 0), Error);
  const auto snap = be.snapshot(0, 0, 0);
  EXPECT_THROW(be.restore(-2, *snap), Error);
  auto cpu = Model::load(dir_, Numerics::Official);
  const auto foreign = cpu->backend().snapshot(0, 0, 0);
  EXPECT_THROW(be.restore(0, *foreign), Error);
}

INSTANTIATE_TEST_SUITE_P(Models, CudaSlotSnapshot, ::testing::Values("bundled", "tiny-q"),
                         [](const auto& info) { return test::test_name(info.param); });

}  // namespace
}  // namespace dsv4
