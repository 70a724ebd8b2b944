#include "runtime/engine_schedule.h"

#include <algorithm>

#include "core/error.h"
#include "runtime/prefix_plan.h"

namespace dsv4 {
namespace {

// The end of the chunk that starts at `from`: the grid's next cut, or the sequence's own next cut.
int64_t chunk_end(const SeqDemand& s, int64_t from, int64_t chunk) {
  if (s.cuts && !s.cuts->empty()) return prefill_chunk_end(from, s.prompt_len, chunk, *s.cuts);
  return std::min(s.prompt_len, (from / chunk + 1) * chunk);
}

}  // namespace

std::vector<StepItem> plan_step(const std::vector<SeqDemand>& seqs, const StepLimits& lim, uint64_t step) {
  const int64_t chunk = std::max<int64_t>(1, std::min(lim.prefill_chunk, lim.max_step_tokens));
  std::vector<size_t> decoders;
  int64_t reserve = 0;  // room kept for the first waiting prefill chunk
  for (size_t i = 0; i < seqs.size(); ++i) {
    if (seqs[i].decoding())
      decoders.push_back(i);
    else if (reserve == 0)
      reserve = chunk_end(seqs[i], seqs[i].prefilled, chunk) - seqs[i].prefilled;
  }
  std::vector<StepItem> plan;
  int64_t left = std::max<int64_t>(1, lim.max_step_tokens);
  const size_t n_dec = std::min<size_t>(decoders.size(), size_t(std::max<int64_t>(0, left - reserve)));
  if (n_dec > 0) {
    const size_t start = n_dec < decoders.size() ? size_t(step % decoders.size()) : 0;
    std::vector<size_t> picked;
    for (size_t k = 0; k < n_dec; ++k) picked.push_back(decoders[(start + k) % decoders.size()]);
    std::sort(picked.begin(), picked.end());
    for (size_t i : picked) plan.push_back({i, true, seqs[i].prefilled, seqs[i].prefilled});
    left -= int64_t(n_dec);
  }
  for (size_t i = 0; i < seqs.size() && left > 0; ++i) {
    const SeqDemand& s = seqs[i];
    int64_t at = s.prefilled;
    while (at < s.prompt_len) {
      const int64_t end = chunk_end(s, at, chunk);
      if (end - at > left) return plan;  // in order: a later sequence does not overtake this one
      plan.push_back({i, false, at, end});
      left -= end - at;
      at = end;
    }
  }
  return plan;
}

CachePool::CachePool(int64_t total_tokens, int64_t page_tokens) : page_tokens_(page_tokens) {
  if (page_tokens <= 0 || total_tokens < page_tokens)
    fail("cache pool: ", total_tokens, " tokens in pages of ", page_tokens, " (need at least one page)");
  total_ = total_tokens / page_tokens;
}

bool CachePool::try_reserve(int64_t pages) {
  if (used_ + pages > total_) return false;
  used_ += pages;
  return true;
}

void CachePool::release(int64_t pages) { used_ = std::max<int64_t>(0, used_ - pages); }

int place_sequence(const std::vector<RankRoom>& ranks) {
  int least = -1;
  for (const RankRoom& r : ranks)
    if (r.held < r.slots && (least < 0 || r.held < least)) least = r.held;
  if (least < 0) return -1;
  int best = -1;
  for (int i = 0; i < int(ranks.size()); ++i) {
    const RankRoom& r = ranks[size_t(i)];
    if (r.held >= r.slots || r.held > least + std::max(1, r.slots / 4)) continue;
    if (best < 0) {
      best = i;
      continue;
    }
    const RankRoom& b = ranks[size_t(best)];
    if (r.hit > b.hit || (r.hit == b.hit && r.held < b.held)) best = i;
  }
  return best;
}

}  // namespace dsv4
