#include "backend/comm/expert_range.h"

#include "backend/comm/communicator.h"
#include "core/error.h"

namespace dsv4 {

ExpertRange expert_range(int64_t E, const comm::Communicator* c) {
  if (!c || c->size() == 1) return {};
  const int64_t N = c->size();
  if (E % N != 0) fail("expert parallelism: ", E, " routed experts do not split evenly over ", N, " ranks");
  return {.first = c->rank() * (E / N), .last = (c->rank() + 1) * (E / N)};
}

ExpertDispatch plan_dispatch(std::span<const int32_t> experts, int64_t per_rank, int ranks) {
  const int64_t E = per_rank * ranks;
  ExpertDispatch d;
  d.send_n.assign(size_t(ranks), 0);
  for (int32_t e : experts) {
    if (e < 0 || e >= E) fail("expert parallelism: expert id ", e, " outside [0, ", E, ")");
    ++d.send_n[size_t(e / per_rank)];
  }
  std::vector<size_t> next(size_t(ranks), 0);
  for (int p = 1; p < ranks; ++p) next[size_t(p)] = next[size_t(p) - 1] + d.send_n[size_t(p) - 1];
  d.order.resize(experts.size());
  d.entry_row.resize(experts.size());
  for (size_t i = 0; i < experts.size(); ++i) {
    const size_t at = next[size_t(experts[i] / per_rank)]++;
    d.order[at] = int32_t(i);
    d.entry_row[i] = int32_t(at);
  }
  return d;
}

}  // namespace dsv4
