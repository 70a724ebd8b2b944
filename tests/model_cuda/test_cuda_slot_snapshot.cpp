// CudaBackend::snapshot / restore through the model (backend/backend.h; the CPU backend's test is
// tests/model/test_slot_snapshot.cpp): a slot restored from a snapshot continues exactly as the
// snapshotted sequence (logits bit for bit), in another slot or in the same slot after it ran ahead;
// snapshots are independent copies; bad slots and foreign snapshots are one-line errors.
#include <gtest/gtest.h>

#include <filesystem>
#include <vector>

#include "backend/cuda/harness.h"
#include "core/error.h"
#include "io/kv_size.h"
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

// The pool's pages hold the compact records of docs/kv-records.md (main entries FP8 + bf16 rope, indexer
// keys FP4): a token of context takes the bytes io/kv_size.h counts for them, an independent sum over
// the layers, and a snapshot's shared page counts one page's storage. (That the records read back as
// the rows the CPU keeps is the bit-identity of every logits test here.)
TEST_P(CudaSlotSnapshot, PagesHoldCompactRecords) {
  const ModelConfig& cfg = m_->config();
  const KvPageInfo info = m_->backend().kv_pages();
  EXPECT_EQ(info.storage, "compact records");
  ASSERT_EQ(info.paged_groups, 1) << "the fixtures' MTP blocks are sliding layers";
  EXPECT_DOUBLE_EQ(info.bytes_per_token(), kv_bytes(cfg, KvStorage::Compact).per_token());
  EXPECT_LT(info.bytes_per_token(), kv_bytes(cfg, KvStorage::Bf16).per_token() / 1.5);
  m_->forward(2, 0, ids(128, 5, cfg.vocab_size), {.all_logits = false});
  const auto s = m_->backend().snapshot(2, 128, 0);
  EXPECT_EQ(s->bytes() - s->copied_bytes(), uint64_t(info.page_bytes));
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

// The KV page pool (docs/kv-pages.md): a snapshot shares the complete page and copies the partial one
// (the pool's used pages do not move); two slots restored from it decode independently, each exactly as
// a cold run of its text with the same calls.
TEST_P(CudaSlotSnapshot, TwoSlotsRestoredFromOneSnapshotDecodeIndependently) {
  const int64_t V = m_->config().vocab_size;
  Backend& be = m_->backend();
  const KvPageInfo info = be.kv_pages();
  ASSERT_EQ(info.page_tokens, 128);
  ASSERT_EQ(info.capacity, 4 * 2 * info.paged_groups);  // 4 slots of 256 positions
  const auto prefix = ids(200, 3, V), a = ids(50, 11, V), b = ids(50, 17, V);
  m_->forward(0, 0, prefix, {.all_logits = false});
  EXPECT_EQ(be.kv_pages().used, 2);
  const auto snap = be.snapshot(0, 200, 0);
  EXPECT_EQ(be.kv_pages().used, 2);
  EXPECT_EQ(snap->shared_pages(), 1);
  be.restore(1, *snap);
  be.restore(2, *snap);
  EXPECT_EQ(be.kv_pages().used, 4);  // page 0 shared, a copy of page 1 per restored slot
  Tensor la({50, V}), lb({50, V});
  for (int64_t i = 0; i < 50; ++i) {
    const Tensor x = test::decode_step(*m_, a[size_t(i)], 200 + i, 1);
    std::copy(x.data.begin(), x.data.end(), la.row(i));
    const Tensor y = test::decode_step(*m_, b[size_t(i)], 200 + i, 2);
    std::copy(y.data.begin(), y.data.end(), lb.row(i));
  }
  // Cold runs with the same calls in the remaining slot (0 after a release, then 3).
  for (int slot : {0, 3}) {
    be.release(slot);
    const std::vector<int32_t>& cont = slot == 0 ? a : b;
    m_->forward(slot, 0, prefix, {.all_logits = false});
    Tensor cold({50, V});
    for (int64_t i = 0; i < 50; ++i) {
      const Tensor x = test::decode_step(*m_, cont[size_t(i)], 200 + i, slot);
      std::copy(x.data.begin(), x.data.end(), cold.row(i));
    }
    cuda::test::compare(slot == 0 ? "restored slot 1 vs cold" : "restored slot 2 vs cold",
                        (slot == 0 ? la : lb).data, cold.data, cuda::test::Tol::Exact);
  }
  EXPECT_NE(la.data, lb.data);
}

TEST_P(CudaSlotSnapshot, ABoundedPoolRunsOutWithAOneLineError) {
  const int64_t V = m_->config().vocab_size;
  auto m = Model::load(dir_, BackendOptions{.device = Device::Cuda, .kernels = KernelTier::Exact,
                                            .capacity = {.max_seqs = 2, .max_ctx = 512, .max_tokens = 128,
                                                         .kv_pages = 2}});
  Backend& be = m->backend();
  EXPECT_EQ(be.kv_pages().free_pages(), 2);
  m->forward(0, 0, ids(128, 1, V), {.all_logits = false});
  m->forward(0, 128, ids(100, 1, V), {.all_logits = false});
  EXPECT_EQ(be.kv_pages().free_pages(), 0);
  try {
    m->forward(1, 0, ids(8, 1, V));
    FAIL() << "a third page from a pool of two";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("kv page pool exhausted"), std::string::npos) << msg;
    EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
  }
  be.release(0);
  EXPECT_EQ(be.kv_pages().free_pages(), 2);
  EXPECT_EQ(m->forward(1, 0, ids(8, 1, V)).dim(0), 8);
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
