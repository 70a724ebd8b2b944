// The schedule that pairs the Model calls of ranks with different call sequences (a speculative round
// here, a prefill there, nothing on a third) into one sequence of steps, across processes: each process
// is one rank with its own Model (its experts, its sequences) and a host communicator of the group (SPMD:
// every process runs its own engine; docs/multi-gpu.md). The rule is Runner::together's (runtime/runner.h)
// for in-process ranks, so both give the same schedule:
//   before each Model call a rank posts its kind (ModelCall); once every rank still running has posted,
//   the step's kind is the lowest such rank's; the ranks that posted that kind make their calls, every
//   other rank an idle call of it (Model::idle: 0 tokens, its MoE layers serving the others' rows), and a
//   rank whose call did not get the step posts it again. A rank whose work is done posts "done" and idles
//   until every rank is done.
// Over a communicator the posting is one all_gather per step of each rank's (state, kind): every rank
// takes part in every step, so the collectives of the calls inside a step pair up as well.
#pragma once
#include <cstdint>
#include <functional>

#include "backend/comm/host_collective.h"
#include "model/model.h"

namespace dsv4 {

// Runs fn() (this rank's Model calls on `m`, any number, or none) with its calls paired with the other
// ranks' through `comm` (every rank of the group must call this once, each with its own fn); returns the
// number of steps (the same on every rank). While it runs it owns m's call hook (Model::on_call; cleared
// after). A failure of fn is rethrown here once this rank idled through the remaining steps (the others
// are not told: their own fns go on); a failed collective (a peer gone, a timeout) is rethrown at once.
// `wait`: how the first post of each step waits for the peers (Unbounded: ranks that may sit idle, such
// as engines between requests).
int64_t together_over(comm::HostCommunicator& comm, Model& m, const std::function<void()>& fn,
                      comm::Wait wait = comm::Wait::Bounded);

}  // namespace dsv4
