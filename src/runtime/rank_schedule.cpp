// together_over (contract in rank_schedule.h).
#include "runtime/rank_schedule.h"

#include <cstring>
#include <exception>
#include <vector>

namespace dsv4 {
namespace {

// One rank's post for a step: what it wants to make next, or that it is done.
struct Post {
  int64_t state = 0;  // 0: done, 1: wants `call`
  int64_t mtp = 0, block = 0, layers = -1;

  ModelCall call() const { return {.mtp = mtp != 0, .block = block, .layers = layers}; }
};
static_assert(sizeof(Post) == 32, "a post is 4 int64 on the wire");

Post want(const ModelCall& c) { return {.state = 1, .mtp = c.mtp ? 1 : 0, .block = c.block, .layers = c.layers}; }

// Every rank's post for the step, in rank order.
std::vector<Post> exchange(comm::HostCommunicator& comm, const Post& mine, comm::Wait wait) {
  std::vector<Post> all(size_t(comm.size()));
  comm.all_gather(std::as_bytes(std::span(&mine, 1)), std::as_writable_bytes(std::span(all)), wait);
  return all;
}

// The step's kind: the lowest rank's that is not done; false when every rank is done.
bool step_of(const std::vector<Post>& all, ModelCall& step) {
  for (const Post& p : all)
    if (p.state == 1) {
      step = p.call();
      return true;
    }
  return false;
}

}  // namespace

int64_t together_over(comm::HostCommunicator& comm, Model& m, const std::function<void()>& fn, comm::Wait wait) {
  int64_t steps = 0;
  bool idling = false;
  auto idle = [&](const ModelCall& c) {
    idling = true;
    try {
      m.idle(c);
    } catch (...) {
      idling = false;
      throw;
    }
    idling = false;
  };
  // The hook runs before each of this rank's own calls: post it until a step takes it, idling in the
  // steps that take another kind.
  m.on_call([&](const ModelCall& c) {
    if (idling) return;  // this rank's own idle call of a step
    for (;;) {
      ModelCall step;
      const bool any = step_of(exchange(comm, want(c), wait), step);
      ++steps;
      if (any && step == c) return;  // the step is this call
      idle(step);  // any: this rank posted, so some rank wants a call
    }
  });
  std::exception_ptr failed;
  try {
    fn();
  } catch (...) {
    failed = std::current_exception();
  }
  try {
    for (;;) {  // done: idle in every step still to come
      ModelCall step;
      if (!step_of(exchange(comm, Post{}, wait), step)) break;
      ++steps;
      idle(step);
    }
  } catch (...) {
    m.on_call({});
    throw;
  }
  m.on_call({});
  if (failed) std::rethrow_exception(failed);
  return steps;
}

}  // namespace dsv4
