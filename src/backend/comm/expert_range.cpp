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

}  // namespace dsv4
