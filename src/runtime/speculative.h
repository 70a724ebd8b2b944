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
//   3. Drafts 2..k (k >= 2) in the sequence's own slot: MTP block 0 at position N+i-2 on (H_{i-1},
//      d_{i-1}) gives q_i, d_i ~ q_i and H_i: the block applied recurrently on its own output streams,
//      as DeepSeek does with one MTP module. They write the slot's MTP ring, so the slot is restored
//      from the snapshot before the verify (no scratch slot is needed).
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
// Batched (speculative_round over several lanes, the engine's continuous batching): each of the steps
// above is one Model call for all lanes where their calls have one shape: the MTP catch-up's last rows
// (one row per lane) and each draft depth j are calls of run length 1 over the lanes; the catch-up's
// earlier rows, the verify and the re-feed are calls of runs of one length, so lanes are grouped by
// that length (a Batch holds runs of one run_len; the verify of lanes drafting k and k' < k is two
// calls). A lane with no room for a draft is in the verify group of length 1 (a plain decode step).
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
  // temperature, top-k, top-p, min-p, seed; greedy by default. No penalties, no grammar.
  SamplingParams sampling = {.temperature = 0, .grammar = {}};
  std::vector<int32_t> stop_ids = {};  // a round ends after the first of these it emits
};

// Whether a request's sampling can be decoded speculatively (no penalties, no grammar).
bool speculative_sampling_ok(const SamplingParams& p);
// One-line errors for options the decoder cannot take (k, sampling) or a model / backend that cannot.
void check_speculative(const Model& m, const SpeculativeOptions& o);

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
  void add(const SpeculativeStats& o);  // sums (the depth vectors grow to the longer)
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

// One sequence's speculative state in a slot: a lane of a (batched) round.
struct SpeculativeLane {
  SpeculativeLane(int slot, SpeculativeOptions o);
  int slot;
  SpeculativeOptions o;
  int64_t pos = 0, mtp_pos = 0;    // N, M
  int32_t current = -1;            // x_N, the last emitted token (not fed); -1 before the first
  uint64_t generated = 0;          // tokens emitted (x_N included)
  Tensor pending;                  // S_M .. S_{N-1}
  std::vector<int32_t> fed_tail;   // x_M .. x_{N-1}
  SpeculativeStats stats;

  // The main model was fed `ids` at pos.. (a prompt chunk) and returned streams S [T, n, D]: they are
  // kept, and the MTP block is fed every kept position but the last (whose next id is not known yet).
  void fed(Model& m, const Tensor& S, const std::vector<int32_t>& ids);
  // The first generated token, drawn from the prompt's last logits row (greedy or g = 0's draw).
  int32_t first(const float* logits, int64_t vocab);
  // The slot was restored to a state of `tokens` (main at tokens.size(), MTP at mtp_pos) whose kept
  // streams are `pending` (S_{mtp_pos} ..): the lane continues its prompt's prefill from there.
  void resume_prefill(const std::vector<int32_t>& tokens, int64_t mtp_pos, const Tensor& pending);
  double uniform(uint64_t g, uint64_t purpose) const;
};

// One round for every lane (distinct slots, each started: current >= 0), lane i allowed at most
// max_new[i] >= 1 tokens: its drafts are cut to fit that and the context (none: a plain step).
// Returns each lane's emitted tokens (1 .. k + 1); the lanes' positions and stats advance.
std::vector<std::vector<int32_t>> speculative_round(Model& m, const std::vector<SpeculativeLane*>& lanes,
                                                    const std::vector<int64_t>& max_new);

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

  int64_t pos() const { return lane_.pos; }      // N: main positions fed
  int64_t mtp_pos() const { return lane_.mtp_pos; }
  int32_t current() const { return lane_.current; }  // x_N, the last emitted token (not fed)
  uint64_t generated() const { return lane_.generated; }
  const SpeculativeStats& stats() const { return lane_.stats; }
  const SpeculativeOptions& options() const { return lane_.o; }

 private:
  Model& m_;
  SpeculativeLane lane_;
};

}  // namespace dsv4
