#include "backend/comm/inprocess_comm.h"

#include <condition_variable>
#include <exception>
#include <mutex>
#include <thread>

namespace dsv4::comm {

struct InProcessGroup::Shared {
  int n = 1;
  std::chrono::milliseconds timeout{};
  std::mutex m;
  std::condition_variable cv;
  std::vector<const Contribution*> posted;  // [n] this collective's contributions (phase 1)
  std::vector<bool> here;                   // [n] who reached the current barrier
  int arrived = 0;
  uint64_t generation = 0;                  // barriers completed
  std::string broken;                       // why the group cannot go on ("" while it can)

  // Waits until every rank reached this barrier; throws when the group is broken, and with Wait::Bounded
  // after the timeout (breaking it).
  void arrive(int r, Op op, Wait wait, std::unique_lock<std::mutex>& lk) {
    if (!broken.empty()) fail(broken);
    const uint64_t g = generation;
    here[size_t(r)] = true;
    if (++arrived == n) {
      arrived = 0;
      here.assign(size_t(n), false);
      ++generation;
      cv.notify_all();
      return;
    }
    const auto passed = [&] { return generation != g || !broken.empty(); };
    bool done = true;
    if (wait == Wait::Unbounded)
      cv.wait(lk, passed);
    else
      done = cv.wait_for(lk, timeout, passed);
    if (generation != g) return;
    if (done) fail(broken);
    std::string missing;
    for (int q = 0; q < n; ++q)
      if (!here[size_t(q)]) missing += (missing.empty() ? "" : ", ") + std::to_string(q);
    broken = cat("in-process comm: rank ", r, " waited ", timeout.count(), " ms in ", op_name(op), " for rank(s) ",
                 missing, "; the group is unusable");
    cv.notify_all();
    fail(broken);
  }
};

namespace {

class InProcessComm final : public HostCommunicator {
 public:
  InProcessComm(InProcessGroup::Shared& s, int r) : s_(s), r_(r) {}
  int rank() const override { return r_; }
  int size() const override { return s_.n; }

 protected:
  std::vector<std::byte> exchange(const Contribution& mine, Wait wait) override {
    std::unique_lock lk(s_.m);
    s_.posted[size_t(r_)] = &mine;
    s_.arrive(r_, mine.op, wait, lk);  // every contribution is posted
    std::vector<Contribution> all;
    for (const Contribution* c : s_.posted) all.push_back(*c);  // views: the peers wait in the second barrier
    lk.unlock();
    std::vector<std::byte> out;
    std::exception_ptr err;
    try {
      out = collective_output(all, r_);
    } catch (...) {
      err = std::current_exception();
    }
    lk.lock();
    s_.arrive(r_, mine.op, Wait::Bounded, lk);  // every rank is done reading the others' buffers
    if (err) std::rethrow_exception(err);
    return out;
  }

 private:
  InProcessGroup::Shared& s_;
  int r_;
};

}  // namespace

InProcessGroup::InProcessGroup(const InProcessOptions& o) : shared_(std::make_unique<Shared>()) {
  if (o.ranks < 1) fail("in-process comm: ranks must be at least 1, got ", o.ranks);
  if (o.timeout.count() <= 0) fail("in-process comm: the timeout must be positive, got ", o.timeout.count(), " ms");
  shared_->n = o.ranks;
  shared_->timeout = o.timeout;
  shared_->posted.assign(size_t(o.ranks), nullptr);
  shared_->here.assign(size_t(o.ranks), false);
  for (int r = 0; r < o.ranks; ++r) ranks_.push_back(std::make_unique<InProcessComm>(*shared_, r));
}

InProcessGroup::~InProcessGroup() = default;

int InProcessGroup::size() const { return shared_->n; }

HostCommunicator& InProcessGroup::rank(int r) {
  if (r < 0 || r >= size()) fail("in-process comm: rank ", r, " is outside 0..", size() - 1);
  return *ranks_[size_t(r)];
}

void InProcessGroup::run(const std::function<void(HostCommunicator&)>& fn) {
  std::vector<std::exception_ptr> errors(static_cast<size_t>(size()));
  std::vector<std::thread> threads;
  for (int r = 0; r < size(); ++r)
    threads.emplace_back([&, r] {
      try {
        fn(rank(r));
      } catch (...) {
        errors[size_t(r)] = std::current_exception();
      }
    });
  for (auto& t : threads) t.join();
  for (const auto& e : errors)
    if (e) std::rethrow_exception(e);
}

}  // namespace dsv4::comm
