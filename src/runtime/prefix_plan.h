// Where a prompt's prefill stops to snapshot its slot for the prefix cache (runtime/prefix_cache.h),
// and the prefill chunks that end exactly there.
//
// The choice (docs/server.md "Prefix cache"): a prompt of L tokens restored from a cached prefix of
// `hit` tokens is snapshotted at
//  - its last 128-token boundary before its last token, B = 128 * floor((L - 1) / 128): multi-turn
//    chat hits it, turn n+1's prompt being turn n's prompt + answer + new message, and so does the same
//    prompt sent again (lookup takes prefixes <= L - 1, so B, not L, serves both); in thinking mode
//    the encoder ends turn n's prompt with <think> where turn n+1 has </think> + the answer (the
//    reasoning dropped), so the two agree only up to that last tag (tests/chat/test_chat_prefix.cpp);
//    for the same reason a snapshot of the generated tokens would not hit there;
//  - its branch point: the longest 128-multiple up to which it agrees with an earlier prompt
//    (PrefixHit::shared_tokens), when that lies between hit and B: the second conversation that shares
//    a system prompt (or few-shot examples) snapshots where it parts from the first; the third hits.
// At most two snapshots a prompt, each the state at its position: O(L) bytes per prompt. A snapshot at
// every boundary (EveryBlock) would hit more often but holds L / 128 snapshots of L / 2 tokens' state
// on average, L^2 / 256 tokens' state in all: L / 256 times the two-point cost (128x at 32K tokens).
#pragma once
#include <cstdint>
#include <vector>

#include "runtime/prefix_cache.h"

namespace dsv4 {

enum class PrefixSnapshots : uint8_t {
  Last,           // only B
  LastAndBranch,  // B and the branch point (the default)
  EveryBlock,     // every multiple of 128 in (hit, B]
};

// The positions (ascending, multiples of 128, in (hit.tokens, B]) where a prompt of `prompt_len` tokens,
// restored from `hit`, is snapshotted: after the prefill reached the position, before feeding more.
std::vector<int64_t> snapshot_points(int64_t prompt_len, const PrefixHit& hit,
                                     PrefixSnapshots policy = PrefixSnapshots::LastAndBranch);

// The end of the prefill chunk starting at `from` (< prompt_len): the next multiple of `chunk` after
// `from`, the next snapshot point after `from`, or prompt_len, whichever comes first. A chunk plan built
// from it ends a chunk exactly at every snapshot point and otherwise keeps the engine's fixed grid
// (engine_schedule.h: batch invariance), whatever the hit it started from.
int64_t prefill_chunk_end(int64_t from, int64_t prompt_len, int64_t chunk, const std::vector<int64_t>& points);

// The whole plan of a prompt's prefill from `from`: the chunks [begin, end) one after another.
struct PrefillChunk {
  int64_t begin = 0, end = 0;
  bool snapshot = false;  // end is a snapshot point: snapshot the slot after this chunk
};
std::vector<PrefillChunk> prefill_chunks(int64_t from, int64_t prompt_len, int64_t chunk,
                                         const std::vector<int64_t>& points);

}  // namespace dsv4
