// The routed experts one rank of an expert-parallel group holds (docs/multi-gpu.md): rank r of N holds
// [r * E/N, (r+1) * E/N) of every MoE layer; without a group (or a group of one) every expert.
#pragma once
#include <climits>
#include <cstdint>

namespace dsv4 {

namespace comm {
class Communicator;
}

struct ExpertRange {
  int64_t first = 0, last = INT64_MAX;
  int64_t count(int64_t E) const { return (last < E ? last : E) - first; }
  bool holds(int64_t e) const { return e >= first && e < last; }
};

// This rank's range of E routed experts; throws one line when they do not split evenly over the group.
ExpertRange expert_range(int64_t E, const comm::Communicator* c);

}  // namespace dsv4
