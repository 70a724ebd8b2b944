// One prompt's use of the prefix cache (runtime/prefix_cache.h) in a slot, as the engine wires it:
// at admission look the prompt up and restore the hit into the sequence's slot; prefill from the hit in
// chunks that end at the snapshot points (runtime/prefix_plan.h); after a chunk that ended at a point,
// snapshot the slot there into the cache.
//
//   PromptPrefix pp(cache, runner, slot, prompt);         // restores on a hit
//   for (int64_t at = pp.start(); at < L; at = end) {
//     end = pp.chunk_end(at, L, chunk);                   // (the engine: its step plan, same cuts)
//     ... prefill prompt[at, end) at positions at.. in slot ...
//     pp.reached(prompt, end);                            // snapshots when end is a point
//   }
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "runtime/prefix_cache.h"
#include "runtime/prefix_plan.h"
#include "runtime/runner.h"

namespace dsv4 {

class PromptPrefix {
 public:
  // Looks `prompt` up in `cache` (counted in its stats), in the place of the slot's rank, and on a hit
  // restores it into the runner's `slot` (whose sequence then continues at start()).
  PromptPrefix(PrefixCache& cache, Runner& runner, int slot, std::span<const int32_t> prompt,
               PrefixSnapshots policy = PrefixSnapshots::LastAndBranch);

  int64_t start() const { return hit_.tokens; }  // the first position left to prefill
  const PrefixHit& hit() const { return hit_; }  // holds the restored snapshot while the request runs
  const std::vector<int64_t>& points() const { return points_; }
  // prefill_chunk_end with this prompt's points.
  int64_t chunk_end(int64_t from, int64_t prompt_len, int64_t chunk) const {
    return prefill_chunk_end(from, prompt_len, chunk, points_);
  }
  // The prefill of `prompt` in the slot reached `pos` (the MTP blocks at `mtp_pos`): when pos is a
  // snapshot point, the slot's state goes into the cache (with `carry`, PrefixHit::carry). True when an
  // entry was added. `carry` is called only then.
  bool reached(std::span<const int32_t> prompt, int64_t pos, int64_t mtp_pos = 0,
               const std::function<std::shared_ptr<const Tensor>()>& carry = {});

 private:
  PrefixCache& cache_;
  Runner& runner_;
  int slot_, place_;
  PrefixHit hit_;
  std::vector<int64_t> points_;
};

}  // namespace dsv4
