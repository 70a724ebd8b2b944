// The routed experts one rank of an expert-parallel group holds (docs/multi-gpu.md): rank r of N holds
// [r * E/N, (r+1) * E/N) of every MoE layer; without a group (or a group of one) every expert.
#pragma once
#include <climits>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

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

// Where a rank's (token, pick) entries go (both backends' expert-parallel MoE): entry i, of expert
// experts[i], goes to rank experts[i] / per_rank. The entries leave grouped by destination rank, each
// group in entry order (token, then pick): order[row] = the entry at send row `row`, entry_row its
// inverse (the row an entry's output comes back at), send_n[p] the entries for rank p.
struct ExpertDispatch {
  std::vector<size_t> send_n;
  std::vector<int32_t> order, entry_row;
};
// Throws one line for an expert outside [0, per_rank * ranks).
ExpertDispatch plan_dispatch(std::span<const int32_t> experts, int64_t per_rank, int ranks);

}  // namespace dsv4
