// The scheduler's decisions, kept free of the model so they can be tested alone:
//  - what the next step runs: one decode token per decoding sequence plus prefill chunks, under a
//    per-step token budget (chunked prefill);
//  - whether a request fits the cache: every sequence reserves pages of a shared pool for its whole
//    context (prompt + the tokens it may generate) when admitted, and returns them when it ends;
//  - over data-parallel ranks with the prefix cache, which rank a new sequence goes to.
//
// Prefill chunks are cut on a fixed grid (positions that are multiples of `prefill_chunk`), never where
// the budget happens to run out, so a sequence's forward passes (and therefore its logits, bit for
// bit) do not depend on which other sequences share its steps. A sequence may name more cuts (the prefix
// cache's snapshot points, runtime/prefix_plan.h): a chunk also ends there.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

namespace dsv4 {

struct SeqDemand {
  int64_t prompt_len = 0;  // tokens to prefill
  int64_t prefilled = 0;   // already fed; == prompt_len: the sequence decodes (one token per step)
  const std::vector<int64_t>* cuts = nullptr;  // ascending positions where a chunk must end too (may be null)
  bool decoding() const { return prefilled >= prompt_len; }
};

struct StepItem {
  size_t seq = 0;            // index into the demands
  bool decode = false;       // one decode token
  int64_t begin = 0, end = 0;  // prefill: prompt tokens [begin, end)
  int64_t tokens() const { return decode ? 1 : end - begin; }
};

struct StepLimits {
  int64_t max_step_tokens = 512;  // decode tokens + prefill tokens per step
  int64_t prefill_chunk = 128;    // grid of prefill cuts; <= max_step_tokens
};

// Decodes first, then prefill chunks in admission order with the rest of the budget. While a prefill
// waits, decodes leave room for its next chunk (so prefill always progresses); when decodes alone
// exceed the budget they take turns, starting at `step` modulo their number. Items of one sequence
// are consecutive and in order.
std::vector<StepItem> plan_step(const std::vector<SeqDemand>& seqs, const StepLimits& lim, uint64_t step);

// A data-parallel rank as a new sequence's placement sees it.
struct RankRoom {
  int held = 0, slots = 0;  // sequences it holds, slots it has
  int64_t hit = 0;          // tokens of the new prompt its prefix cache holds
};

// The rank a new sequence goes to: the longest hit among the ranks with a free slot that hold at most a
// quarter of their slots (at least 1) more sequences than the least loaded such rank; ties: the fewest
// sequences, then the lowest rank. A hit saves its prefill; an unbalanced rank slows every round (the
// ranks' calls are collective, the slowest sets the pace). -1: no rank has a free slot.
int place_sequence(const std::vector<RankRoom>& ranks);

// A pool of cache pages shared by all sequences: admission control's budget.
class CachePool {
 public:
  CachePool(int64_t total_tokens, int64_t page_tokens);
  int64_t pages_for(int64_t tokens) const { return (tokens + page_tokens_ - 1) / page_tokens_; }
  bool try_reserve(int64_t pages);  // false (and nothing reserved) when they do not fit now
  void release(int64_t pages);
  int64_t used_pages() const { return used_; }
  int64_t total_pages() const { return total_; }
  int64_t page_tokens() const { return page_tokens_; }

 private:
  int64_t page_tokens_, total_, used_ = 0;
};

}  // namespace dsv4
