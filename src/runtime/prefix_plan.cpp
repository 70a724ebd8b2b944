#include "runtime/prefix_plan.h"

#include <algorithm>

#include "core/error.h"

namespace dsv4 {

std::vector<int64_t> snapshot_points(int64_t prompt_len, const PrefixHit& hit, PrefixSnapshots policy) {
  std::vector<int64_t> p;
  if (prompt_len < 1) return p;
  const int64_t last = (prompt_len - 1) / kPrefixBlock * kPrefixBlock;
  if (policy == PrefixSnapshots::EveryBlock) {
    for (int64_t b = hit.tokens + kPrefixBlock; b <= last; b += kPrefixBlock) p.push_back(b);
    return p;
  }
  if (policy == PrefixSnapshots::LastAndBranch && hit.shared_tokens > hit.tokens && hit.shared_tokens < last)
    p.push_back(hit.shared_tokens);
  if (last > hit.tokens) p.push_back(last);
  return p;
}

int64_t prefill_chunk_end(int64_t from, int64_t prompt_len, int64_t chunk, const std::vector<int64_t>& points) {
  if (chunk < 1) fail("prefill chunk of ", chunk, " tokens, expected at least 1");
  if (from < 0 || from >= prompt_len) fail("prefill from position ", from, " of a ", prompt_len, "-token prompt");
  int64_t end = std::min(prompt_len, (from / chunk + 1) * chunk);
  const auto next = std::upper_bound(points.begin(), points.end(), from);
  if (next != points.end()) end = std::min(end, *next);
  return end;
}

std::vector<PrefillChunk> prefill_chunks(int64_t from, int64_t prompt_len, int64_t chunk,
                                         const std::vector<int64_t>& points) {
  std::vector<PrefillChunk> out;
  for (int64_t at = from; at < prompt_len;) {
    const int64_t end = prefill_chunk_end(at, prompt_len, chunk, points);
    out.push_back({.begin = at, .end = end, .snapshot = std::binary_search(points.begin(), points.end(), end)});
    at = end;
  }
  return out;
}

}  // namespace dsv4
