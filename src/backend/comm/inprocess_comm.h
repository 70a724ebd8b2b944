// The in-process communicator: N ranks as threads of one process sharing memory, so the multi-rank
// decomposition runs on the CPU in CI (issue 16). A group owns the shared slots; each rank's thread
// uses its own communicator (group.rank(r)). A collective posts this rank's contribution, meets the
// others at a barrier, computes its own result from every contribution (host_collective.h: sums in
// rank order, the same bits on every rank and every run), and meets them again before returning, so
// no rank reuses its send buffer while a peer still reads it.
//
// A rank that does not arrive within `timeout` breaks the group: the waiting ranks throw a one-line
// dsv4::Error naming the collective and the missing ranks, and every later call throws too. A rank in
// an all_gather with Wait::Unbounded waits for the others without a limit, until they come or the
// group breaks.
#pragma once
#include <chrono>
#include <functional>
#include <memory>
#include <vector>

#include "backend/comm/host_collective.h"

namespace dsv4::comm {

struct InProcessOptions {
  int ranks = 1;
  std::chrono::milliseconds timeout{60000};  // how long a rank waits for its peers at one collective
};

class InProcessGroup {
 public:
  explicit InProcessGroup(const InProcessOptions& o);
  ~InProcessGroup();
  InProcessGroup(const InProcessGroup&) = delete;
  InProcessGroup& operator=(const InProcessGroup&) = delete;

  int size() const;
  // Rank r's communicator; call its collectives from one thread (that rank's).
  HostCommunicator& rank(int r);
  // Runs fn(rank r's communicator) on size() threads, one per rank, joins them all, then rethrows the
  // exception of the lowest rank that threw (if any).
  void run(const std::function<void(HostCommunicator&)>& fn);

  struct Shared;

 private:
  std::unique_ptr<Shared> shared_;
  std::vector<std::unique_ptr<HostCommunicator>> ranks_;
};

}  // namespace dsv4::comm
