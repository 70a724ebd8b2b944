// A rank group behind a Runner (issue 16, docs/multi-gpu.md): N ranks, each with its own Model holding
// the routed experts [r E / N, (r + 1) E / N) (BackendOptions::comm), exchange token rows in the MoE.
// Every rank must make every Model call in lockstep, so rank 0's Runner (runtime/runner.h) drives the
// group: the sequences live on rank 0 (the commands run one sequence), and before each of its calls it
// tells the other ranks, which make the same call with 0 tokens (they hold no sequence; their experts
// still serve rank 0's tokens). The result is rank 0's logits bit for bit as on one rank (the MoE's
// combine sums in a fixed order).
//
// Data-parallel (RankSpec::data_parallel, `serve --ranks N`): the in-process ranks each hold their own
// sequences; the runner over them (a RankSet, runtime/runner.h) spreads the sequences and makes every
// call a round of all ranks, each with its own rows. Each rank has o.capacity.max_seqs slots.
//
// Two kinds of group:
//   - in-process: ranks 1..N-1 are threads of this process (comm::InProcessGroup); they wait for
//     rank 0's calls without a timeout (a chat may sit idle between turns);
//   - TCP: this process is one rank of WORLD_SIZE processes joined by the rendezvous (comm::connect_tcp);
//     before each call rank 0 sends a one-byte "call" through the communicator (an all_gather), at the end
//     a "stop". A rank other than 0 gets no Runner: load_ranked follows rank 0 to the end and returns null.
//     Between two calls the others wait without a time limit (comm::Wait::Unbounded: a chat may sit idle
//     for hours) while rank 0's connection holds; when rank 0's process exits or its group breaks they end
//     at once with one line. Every collective inside a call, and rank 0's announcement, waits at most the
//     rendezvous' timeout (DSV4_COMM_TIMEOUT, 60 s).
#pragma once
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "backend/comm/tcp_comm.h"
#include "runtime/runner.h"

namespace dsv4 {

struct RankSpec {
  int ranks = 1;                        // in-process ranks (threads), used when tcp is unset
  std::optional<comm::Rendezvous> tcp{};  // set: this process is tcp->rank of a TCP group of tcp->world_size
  bool data_parallel = false;           // in-process ranks > 1: each rank its own sequences (not with tcp)
  bool gpu_per_rank = false;            // cuda, in-process ranks: rank r on GPU o.gpu + r (`--gpus N`); else all on o.gpu
};

// The runner of rank 0 over the group `spec` describes, each rank's model loaded from `dir` with `o`
// (o.comm is set per rank; `progress` reports rank 0's load). ranks == 1 without tcp: a plain runner.
// On a TCP rank other than 0: makes rank 0's calls until it stops, then returns nullptr.
// Throws dsv4::Error with one line when the group cannot form or a rank cannot load its model (the
// experts do not split evenly over the ranks, ...).
std::unique_ptr<Runner> load_ranked(const std::string& dir, const BackendOptions& o, const RankSpec& spec,
                                    const LoadProgress& progress = {});
// The same with each rank's model made by `make` (given the rank's options, o.comm set): a checkpoint's
// load, or Model::dummy of a preset (`dsv4 bench --ranks N`; every rank must make the same weights).
using ModelFactory = std::function<std::unique_ptr<Model>(const BackendOptions& o, const LoadProgress& progress)>;
std::unique_ptr<Runner> load_ranked(const ModelFactory& make, const BackendOptions& o, const RankSpec& spec,
                                    const LoadProgress& progress = {});

}  // namespace dsv4
