// Speculative decoding of one sequence with MTP block 0 as the drafter (issue #18; MODEL.md §8).
//
// Names: the main model has fed positions [0, N) of the sequence; x_N, the last token emitted, is not
// fed yet; S_t [n, D] are the main model's last-layer streams at position t (before hc_head). The MTP
// block's position t takes S_t and the token that follows it, x_{t+1} (DeepSeek's convention), and
// keeps its own window ring in the slot at those positions.
//
// A round (one verify step), with k drafts:
//   1. MTP catch-up: MTP block 0 over the positions it has not seen, M .. N-1, with S_M .. S_{N-1}
//      (kept from the main calls that fed them) and ids x_{M+1} .. x_N: one call. Its last row's
//      logits give q_1 and draft d_1 ~ q_1 (the token after x_N); its last row's output streams H_1.
//   2. snapshot of the slot (main at N, MTP block at N).
//   3. Drafts 2..k (k >= 2) in the scratch slot, restored from that snapshot: MTP block 0 at position
//      N+i-2 on (H_{i-1}, d_{i-1}) gives q_i, d_i ~ q_i and H_i: the block applied recurrently on its
//      own output streams, as DeepSeek does with one MTP module. The real slot's MTP ring is untouched.
//   4. Verify: ONE main call over x_N, d_1 .. d_k at positions N .. N+k, logits of all k+1 rows; row
//      j-1 gives p_j, the target distribution of the token d_j stands for.
//   5. Accept: for j = 1..k, d_j is judged by the rejection rule (runtime/speculative_sampling.h)
//      against p_j and q_j; the first rejected draft is replaced by a residual draw and ends the
//      round; when all k are accepted a bonus token is drawn from p_{k+1}. A round emits a+1 tokens
//      (a drafts accepted), fewer when a stop id or the round's limit cuts it.
//   6. State: the slot must end as if the emitted tokens had been fed one at a time and no draft had
//      been made: main at N+a+1 having fed x_N, d_1 .. d_a; MTP block at N (the catch-up of the next
//      round feeds it S_N .. S_{N+a} with the emitted ids). All k accepted: the verify fed exactly
//      that, nothing to undo (the MTP ring was only written in the scratch slot). Otherwise the slot
//      is restored from the snapshot and x_N, d_1 .. d_a are fed again in one main call (no head):
//      every piece of state (window rings, compressor partial windows with the CSA overlap,
//      compressed entries, indexer keys, the MTP ring) is then the snapshot's plus those tokens.
//
// Exactness rests on the backend's results not depending on how a sequence's tokens are split into
// calls (the CPU backend and the CUDA exact tier: tests/model/test_slot_snapshot feeds a continuation
// in different chunks, bit for bit); greedy output is then token for token plain greedy decoding.
//
// Draws (temperature > 0), reproducible: u = philox_uniform(seed, 4 g + purpose) where g is the
// index of the generated token the draw decides (0: the first token after the prompt) and purpose 0
// draws the draft d for g from q, 1 the acceptance test of that draft, 2 the target draw for g (the
// first token, a residual, a bonus). A draw for g is only used in the round that fixes token g, and
// draws of a discarded draft never influence an emitted token, so the draws that decide g are fresh.
#pragma once
#include <cstdint>
#include <limits>
#include <memory>
#include <vector>

#include "backend/backend.h"
#include "core/tensor.h"
#include "model/model.h"
#include "runtime/sampler.h"
#include "runtime/speculative_sampling.h"

namespace dsv4 {

struct SpeculativeOptions {
  int64_t drafts = 2;        // k: drafts per verify step, 1 .. 3
  int scratch_slot = -1;     // a slot the decoder overwrites (drafts 2..k run there); needed when k >= 2
  // temperature, top-k, top-p, min-p, seed; greedy by default. No penalties, no grammar.
  SamplingParams sampling = {.temperature = 0, .grammar = {}};
  std::vector<int32_t> stop_ids = {};  // a round ends after the first of these it emits
};

// Counters over a decoder's rounds (the first token, drawn from the prompt's logits, is not a round).
struct SpeculativeStats {
  int64_t rounds = 0;       // verify steps (one main call of 1 + drafts tokens each)
  int64_t plain_steps = 0;  // steps without drafts (no room left in the context or the limit)
  int64_t proposed = 0;     // drafts proposed
  int64_t accepted = 0;     // drafts accepted
  int64_t emitted = 0;      // tokens emitted by rounds (accepted drafts, residual and bonus tokens)
  int64_t refeeds = 0;      // rounds that restored the slot and fed the accepted tokens again
  std::vector<int64_t> proposed_at, accepted_at;  // per draft depth j = 1..k (index j-1)
  double acceptance() const { return proposed ? double(accepted) / double(proposed) : 0; }
  double tokens_per_verify() const { return rounds ? double(emitted) / double(rounds) : 0; }
};

// What a decoder carries between rounds, to resume another decoder from it (tests, a prefix cache).
struct SpeculativeState {
  std::shared_ptr<const SlotSnapshot> slot;  // the backend's copy of the slot
  int64_t pos = 0;                           // N
  int64_t mtp_pos = 0;                       // M
  int32_t current = -1;                      // x_N
  uint64_t generated = 0;                    // tokens emitted so far (x_N included)
  Tensor pending;                            // S_M .. S_{N-1} [N - M, n, D]
  std::vector<int32_t> fed_tail;             // x_M .. x_{N-1}
};

class SpeculativeDecoder {
 public:
  // One sequence of `model` in `slot` (overwritten from position 0 by start()). The model needs an
  // MTP block (num_mtp() >= 1).
  SpeculativeDecoder(Model& model, int slot, SpeculativeOptions o);

  // Feeds the prompt (main model and MTP block; split at the backend's tokens per call) and returns
  // the first generated token, drawn from the last position's logits (greedy or g = 0's draw).
  int32_t start(const std::vector<int32_t>& prompt);
  // One round (above): the emitted tokens, 1 .. min(k + 1, max_new). The drafts are cut to fit
  // max_new and the context; with no room for a draft it is one plain step.
  std::vector<int32_t> round(int64_t max_new = std::numeric_limits<int64_t>::max());
  // start(prompt), then rounds until n tokens (the first included) or a stop id.
  std::vector<int32_t> generate(const std::vector<int32_t>& prompt, int64_t n);

  SpeculativeState save();                  // a copy of where the decoder stands (snapshots the slot)
  void resume(const SpeculativeState& s);   // continue from a save() of any decoder of this model

  int64_t pos() const { return pos_; }      // N: main positions fed
  int64_t mtp_pos() const { return mtp_pos_; }
  int32_t current() const { return current_; }  // x_N, the last emitted token (not fed)
  uint64_t generated() const { return generated_; }
  const SpeculativeStats& stats() const { return stats_; }
  const SpeculativeOptions& options() const { return o_; }

 private:
  struct Draft {
    int32_t id;
    TokenDistribution q;
  };
  double uniform(uint64_t g, uint64_t purpose) const;
  int32_t draw_target(const TokenDistribution& p, uint64_t g) const;
  // Main call over `ids` at pos_.. (no head unless head_rows); returns the streams [T, n, D].
  Tensor feed_main(int slot, int64_t pos, const std::vector<int32_t>& ids, int64_t head_rows);
  // MTP block 0 over rows [r0, r1) of the pending streams with their next ids, at mtp_pos_ + r0 ...
  // (one call per backend chunk); logits of the last row when `head`.
  void feed_mtp(int64_t rows, bool head);
  void append_pending(const Tensor& S, int64_t r0, int64_t r1, const std::vector<int32_t>& ids);
  std::vector<int32_t> plain_step();

  Model& m_;
  Backend& be_;
  int slot_;
  SpeculativeOptions o_;
  int64_t pos_ = 0, mtp_pos_ = 0;
  int32_t current_ = -1;
  uint64_t generated_ = 0;
  Tensor pending_;                 // S_M .. S_{N-1}
  std::vector<int32_t> fed_tail_;  // x_M .. x_{N-1}
  SpeculativeStats stats_;
};

}  // namespace dsv4
