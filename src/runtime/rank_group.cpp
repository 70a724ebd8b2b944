#include "runtime/rank_group.h"

#include <algorithm>
#include <climits>
#include <condition_variable>
#include <cstddef>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

#include "backend/comm/inprocess_comm.h"
#include "core/error.h"

namespace dsv4 {
namespace {

// Ranks 1..N-1 as threads of this process. Rank 0 posts each call's kind (a queue, trimmed below the
// slowest thread); each thread makes an idle call (Model::idle: 0 tokens, its MoE layers serving rank 0's
// tokens routed to its experts) of each kind posted, in order, and returns once stopped with none left.
class ThreadPeers final : public RankPeers {
 public:
  ThreadPeers(const ModelFactory& make, const BackendOptions& o, int ranks, bool gpu_per_rank)
      : group_({.ranks = ranks}), gpu_per_rank_(gpu_per_rank) {
    errors_.resize(size_t(ranks));
    done_.assign(size_t(ranks), 0);
    done_[0] = INT64_MAX;
    for (int r = 1; r < ranks; ++r) threads_.emplace_back([this, make, o, r] { follow(make, o, r); });
  }
  ~ThreadPeers() override {
    {
      const std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    for (std::thread& t : threads_) t.join();
  }
  ThreadPeers(const ThreadPeers&) = delete;
  ThreadPeers& operator=(const ThreadPeers&) = delete;

  comm::Communicator& leader() { return group_.rank(0); }

  // Waits until every other rank loaded its model; throws the first error in rank order (`mine` is
  // rank 0's, empty when it loaded).
  void wait_loaded(const std::string& mine) {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return loaded_ == group_.size() - 1; });
    if (!mine.empty()) fail(mine);
    for (const std::string& e : errors_)
      if (!e.empty()) fail(e);
  }

  void call(const ModelCall& c) override {
    {
      const std::lock_guard<std::mutex> lock(mu_);
      calls_.push_back(c);
      ++posted_;
      // Every follower has made the calls below the slowest one's count: drop those.
      const int64_t done = *std::min_element(done_.begin(), done_.end());
      if (done > first_ + 1024) {
        calls_.erase(calls_.begin(), calls_.begin() + (done - first_));
        first_ = done;
      }
    }
    cv_.notify_all();
  }

 private:
  void follow(const ModelFactory& make, BackendOptions o, int r) {
    std::unique_ptr<Model> m;
    std::string error;
    try {
      o.comm = &group_.rank(r);
      if (gpu_per_rank_) o.gpu += r;
      m = make(o, {});
    } catch (const std::exception& e) {
      error = e.what();
    }
    {
      const std::lock_guard<std::mutex> lock(mu_);
      errors_[size_t(r)] = error;
      ++loaded_;
    }
    cv_.notify_all();
    if (!m) return;
    for (int64_t done = 0;; ++done) {
      ModelCall c;
      {
        std::unique_lock<std::mutex> lock(mu_);
        done_[size_t(r)] = done;
        cv_.wait(lock, [&] { return posted_ > done || stop_; });
        if (posted_ == done) {  // stopped with every call made
          done_[size_t(r)] = INT64_MAX;
          return;
        }
        c = calls_[size_t(done - first_)];
      }
      try {
        m->idle(c);
      } catch (const std::exception&) {
        const std::lock_guard<std::mutex> lock(mu_);
        done_[size_t(r)] = INT64_MAX;
        return;  // the group is broken: rank 0's collective reports it
      }
    }
  }

  comm::InProcessGroup group_;
  bool gpu_per_rank_ = false;
  std::mutex mu_;
  std::condition_variable cv_;
  int64_t posted_ = 0;
  std::vector<ModelCall> calls_;  // calls first_ .. posted_ - 1, in order
  int64_t first_ = 0;
  std::vector<int64_t> done_;     // per rank: calls it made (rank 0 and a rank that left: INT64_MAX)
  int loaded_ = 0;
  bool stop_ = false;
  std::vector<std::string> errors_;  // per rank: its load error
  std::vector<std::thread> threads_;
};

// Data-parallel ranks as threads of this process: rank r's runner (its model, its slots) lives on
// thread r (rank 0: the caller's); each() hands every thread the same job and waits for all of them.
class ThreadRanks final : public RankSet {
 public:
  ThreadRanks(const ModelFactory& make, const BackendOptions& o, int ranks, bool gpu_per_rank, const LoadProgress& progress)
      : group_({.ranks = ranks}), gpu_per_rank_(gpu_per_rank), runners_(size_t(ranks)), errors_(size_t(ranks)), load_errors_(size_t(ranks)) {
    for (int r = 1; r < ranks; ++r) threads_.emplace_back([this, make, o, r] { follow(make, o, r); });
    std::string mine;
    try {
      runners_[0] = load(make, o, 0, progress);
    } catch (const std::exception& e) {
      mine = e.what();
    }
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return loaded_ == ranks - 1; });
    lock.unlock();
    std::string first = mine;
    for (int r = 1; r < ranks && first.empty(); ++r)
      if (!runners_[size_t(r)]) first = load_errors_[size_t(r)];
    if (!first.empty()) {
      stop();
      fail(first);
    }
  }
  ~ThreadRanks() override { stop(); }
  ThreadRanks(const ThreadRanks&) = delete;
  ThreadRanks& operator=(const ThreadRanks&) = delete;

  int size() const override { return group_.size(); }
  Runner& rank(int r) override { return *runners_.at(size_t(r)); }

  void each(const std::function<void(int r)>& fn) override {
    {
      const std::lock_guard<std::mutex> lock(mu_);
      job_ = &fn;
      ++posted_;
      running_ = size() - 1;
    }
    cv_.notify_all();
    try {
      fn(0);
    } catch (...) {
      errors_[0] = std::current_exception();
    }
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return running_ == 0; });
    job_ = nullptr;
    for (std::exception_ptr& e : errors_)
      if (e) {
        std::exception_ptr first;
        for (std::exception_ptr& x : errors_) {
          if (x && !first) first = x;
          x = nullptr;
        }
        std::rethrow_exception(first);
      }
  }

 private:
  std::unique_ptr<Runner> load(const ModelFactory& make, BackendOptions o, int r, const LoadProgress& progress) {
    o.comm = &group_.rank(r);
    if (gpu_per_rank_) o.gpu += r;
    return std::make_unique<Runner>(make(o, progress));
  }

  void follow(const ModelFactory& make, const BackendOptions& o, int r) {
    std::string error;
    try {
      runners_[size_t(r)] = load(make, o, r, {});
    } catch (const std::exception& e) {
      error = e.what();
    }
    {
      const std::lock_guard<std::mutex> lock(mu_);
      load_errors_[size_t(r)] = error;
      ++loaded_;
    }
    cv_.notify_all();
    for (int64_t done = 0;;) {
      const std::function<void(int)>* job = nullptr;
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [&] { return posted_ > done || stop_; });
        if (posted_ == done) return;  // stopped
        done = posted_;
        job = job_;
      }
      try {
        (*job)(r);
      } catch (...) {
        errors_[size_t(r)] = std::current_exception();
      }
      {
        const std::lock_guard<std::mutex> lock(mu_);
        --running_;
      }
      cv_.notify_all();
    }
  }

  void stop() {
    {
      const std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    for (std::thread& t : threads_) t.join();
    threads_.clear();
  }

  comm::InProcessGroup group_;
  bool gpu_per_rank_ = false;
  std::vector<std::unique_ptr<Runner>> runners_;  // after group_: their models go before the communicators
  std::mutex mu_;
  std::condition_variable cv_;
  const std::function<void(int)>* job_ = nullptr;
  int64_t posted_ = 0;
  int running_ = 0, loaded_ = 0;
  bool stop_ = false;
  std::vector<std::exception_ptr> errors_;  // per rank: the current job's failure
  std::vector<std::string> load_errors_;   // per rank: why it could not load
  std::vector<std::thread> threads_;
};

// One byte from every rank; rank 0's says what the group does next: kStop, kCall (the main stack), kMtp + k
// (MTP block k), or kLayers (the main stack's first L layers: L follows as a second all_gather of an int64).
// The others wait for it without a time limit (a chat's user may think for hours); rank 0's wait is bounded
// (the others reach it once they finished the previous call).
constexpr uint8_t kStop = 0, kCall = 1, kMtp = 2, kLayers = 255;
std::vector<uint8_t> gather_byte(comm::HostCommunicator& c, uint8_t mine, comm::Wait wait) {
  std::vector<uint8_t> all(size_t(c.size()));
  comm::all_gather<uint8_t>(c, std::span<const uint8_t>(&mine, 1), all, wait);
  return all;
}

// Every rank's int64 (rank 0's is the layer count of a kLayers call; the others send -1).
int64_t gather_layers(comm::Communicator& c, int64_t mine) {
  std::vector<int64_t> all(size_t(c.size()));
  comm::all_gather<int64_t>(c, std::span<const int64_t>(&mine, 1), all);
  return all[0];
}

// Rank 0 of a TCP group: a "call" byte before each call, "stop" when the runner goes.
class TcpPeers final : public RankPeers {
 public:
  explicit TcpPeers(std::unique_ptr<comm::HostCommunicator> c) : c_(std::move(c)) {}
  ~TcpPeers() override {
    try {
      gather_byte(*c_, kStop, comm::Wait::Bounded);
    } catch (const std::exception&) {  // a broken group closed its connections: the others learnt it
    }
  }
  void call(const ModelCall& c) override {
    if (c.mtp && (c.block < 0 || c.block >= kLayers - kMtp)) fail("rank group: MTP block ", c.block, " cannot be announced");
    if (!c.mtp && c.layers >= 0) {
      gather_byte(*c_, kLayers, comm::Wait::Bounded);
      gather_layers(*c_, c.layers);
      return;
    }
    gather_byte(*c_, c.mtp ? uint8_t(kMtp + c.block) : kCall, comm::Wait::Bounded);
  }

 private:
  std::unique_ptr<comm::HostCommunicator> c_;
};

std::unique_ptr<Runner> load_tcp(const ModelFactory& make, BackendOptions o, const comm::Rendezvous& rv,
                                 const LoadProgress& progress) {
  std::unique_ptr<comm::HostCommunicator> c = comm::connect_tcp(rv);
  const int rank = c->rank();
  o.comm = c.get();
  std::unique_ptr<Model> m;
  std::string error;
  try {
    m = make(o, rank == 0 ? progress : LoadProgress{});
  } catch (const std::exception& e) {
    error = e.what();
  }
  // Every rank learns whether all loaded before the first call (else the others would wait for it).
  const std::vector<uint8_t> ok = gather_byte(*c, m ? 1 : 0, comm::Wait::Bounded);
  if (!m) fail(error);
  std::string failed;
  for (size_t p = 0; p < ok.size(); ++p)
    if (!ok[p]) failed += (failed.empty() ? "" : ", ") + std::to_string(p);
  if (!failed.empty()) fail("rank(s) ", failed, " of WORLD_SIZE=", c->size(), " could not load the model (each says why)");
  if (rank == 0) return std::make_unique<Runner>(std::move(m), std::make_unique<TcpPeers>(std::move(c)));
  for (;;) {
    uint8_t next = kStop;
    try {
      next = gather_byte(*c, kStop, comm::Wait::Unbounded)[0];
    } catch (const Error& e) {
      fail("rank group: rank ", rank, " waited for rank 0's next call: ", e.what());
    }
    if (next == kStop) return nullptr;
    if (next == kLayers) m->idle({.layers = gather_layers(*c, -1)});
    else m->idle(next == kCall ? ModelCall{} : ModelCall{.mtp = true, .block = next - kMtp});
  }
}

}  // namespace

std::unique_ptr<Runner> load_ranked(const ModelFactory& make, const BackendOptions& o, const RankSpec& spec,
                                    const LoadProgress& progress) {
  if (spec.tcp) return load_tcp(make, o, *spec.tcp, progress);
  if (spec.ranks < 1) fail("ranks: expected at least 1, got ", spec.ranks);
  if (spec.ranks == 1) return std::make_unique<Runner>(make(o, progress));
  if (spec.data_parallel) return std::make_unique<Runner>(std::make_unique<ThreadRanks>(make, o, spec.ranks, spec.gpu_per_rank, progress));
  auto peers = std::make_unique<ThreadPeers>(make, o, spec.ranks, spec.gpu_per_rank);
  std::unique_ptr<Model> m;
  std::string error;
  try {
    BackendOptions mine = o;
    mine.comm = &peers->leader();
    m = make(mine, progress);
  } catch (const std::exception& e) {
    error = e.what();
  }
  peers->wait_loaded(error);
  return std::make_unique<Runner>(std::move(m), std::move(peers));
}

std::unique_ptr<Runner> load_ranked(const std::string& dir, const BackendOptions& o, const RankSpec& spec,
                                    const LoadProgress& progress) {
  return load_ranked([dir](const BackendOptions& b, const LoadProgress& p) { return Model::load(dir, b, p); }, o, spec,
                     progress);
}

}  // namespace dsv4
