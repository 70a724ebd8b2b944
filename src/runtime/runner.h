// Runner: the one driver of a Model (model/model.h) for the generation loop, the engine and the
// commands. It holds the sequence slots (new_sequence / release, as many as the backend's capacity),
// checks every call's positions against each slot's, cuts chunks at the backend's tokens per call
// (pieces(), the one place a chunk is split), and decides per row where the next token is drawn
// (on_backend(), the one place): by the backend's sampler (Backend::sample: Philox(seed, step), on
// both backends; a grammar's mask of the step goes with the row and the drawn id advances it) when the
// request asks for no penalties and no logprobs, else by the request's Sampler (runtime/sampler.h) on
// the logits.
//
// Calls: a prefill chunk is one Model::step per piece (run_len = the piece; the head only on the last
// piece's last row) or, when every position's logits are wanted, Model::forward per piece; a decode
// batch (one token of each of B sequences) is ONE Model::step (run_len 1, head rows B; split only
// where B exceeds what one call takes). Rows drawn on the host come first in a decode call so that
// only their logits are read back.
//
// Sampling parameters exist in one form above the backend, SamplingParams (inside each row's Sampler);
// the backend's SampleRow is made here, at the boundary.
//
// A Model is driven by one Runner at a time (the slots are the backend's). A sequence fed from
// position 0 starts fresh in its slot, so a released slot is reused without a reset; release gives the
// slot's KV pages back to the backend's pool (docs/kv-pages.md).
//
// Data-parallel ranks (a RankSet, runtime/rank_group.h; docs/multi-gpu.md): the runner's slots are
// spread over N rank runners, each with its own model (its share of the routed experts), slots and
// state. A new sequence goes to the rank holding the fewest; every call of the runner becomes one
// round in which all ranks make one Model call together (the MoE's dispatch and combine are
// collectives): a decode batch is split by rank (a rank without rows, or with fewer pieces than the
// others, makes calls of 0 tokens), a prefill piece runs on its sequence's rank while the others make
// a call of 0 tokens. Each row's logits are what one rank computes (the expert-parallel combine sums
// each token's picks in expert order, whichever rank holds it).
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "core/tensor.h"
#include "io/config.h"
#include "model/model.h"
#include "runtime/generate.h"
#include "runtime/sampler.h"
#include "tokenizer/tokenizer.h"

namespace dsv4 {

struct DecodeItem {
  int slot = 0;
  int32_t token = 0;
  int64_t pos = 0;  // the token's position in its sequence
};

// One row's next token: how it is drawn (in) and what was drawn (out).
struct Draw {
  Sampler* sampler = nullptr;                     // the request's parameters; draws host rows
  const std::vector<int32_t>* history = nullptr;  // prompt + generated so far (the penalties); may be null
  uint64_t step = 0;                              // tokens generated before: the backend draw's Philox counter
  int top_logprobs = -1;                          // -1: none; 0: the chosen token's; N: also the N best
  int32_t id = -1;                                // out: the drawn id (-1 when `error` is set)
  Logprobs logprobs{};                            // out: with top_logprobs >= 0
  std::string error{};                            // out: why no id could be drawn (a grammar)
};

// Called between the pieces of a long chunk with the tokens fed so far; false stops the chunk there.
using PieceFn = std::function<bool(int64_t done, int64_t total)>;

// The other ranks of an expert-parallel group (runtime/rank_group.h) behind a runner of rank 0: told
// before every Model call (Model::on_call: the main stack or an MTP block) so that each makes the same
// call with 0 tokens (the MoE's collectives need every rank); destroyed before the runner's model, which
// stops them.
class RankPeers {
 public:
  virtual ~RankPeers() = default;
  virtual void call(const ModelCall& c) = 0;
};

class Runner;

// The data-parallel ranks behind a runner: rank r's runner (its own model and slots), and a way to run
// one round of calls on all of them at once.
class RankSet {
 public:
  virtual ~RankSet() = default;
  virtual int size() const = 0;
  virtual Runner& rank(int r) = 0;
  // fn(r) for every rank r, each on its own thread (rank 0 on the caller's), all at once; returns when
  // every rank has returned, then rethrows the first failure in rank order.
  virtual void each(const std::function<void(int r)>& fn) = 0;
};

class Runner {
 public:
  explicit Runner(Model& model);                  // `model` outlives the runner
  explicit Runner(std::unique_ptr<Model> model);
  // Rank 0 of a group: every call of `model` is announced to `peers` first (whoever makes it).
  Runner(std::unique_ptr<Model> model, std::unique_ptr<RankPeers> peers);
  // Over data-parallel ranks (model() is rank 0's).
  explicit Runner(std::unique_ptr<RankSet> ranks);
  // Model::load(dir, o, progress) under a runner.
  static std::unique_ptr<Runner> load(const std::string& dir, const BackendOptions& o, const LoadProgress& progress = {});
  // Whether Device::Cuda can be loaded here: a CUDA build and a Hopper GPU (the backend factory's answer).
  static bool cuda_available();
  static int cuda_devices();  // CUDA devices this process sees (0 without CUDA)

  Model& model() { return model_; }
  int ranks() const;  // data-parallel ranks (1 without a RankSet)
  Runner& rank(int r);            // rank r's runner (this one without a RankSet)
  int rank_of(int slot) const;    // the rank holding the taken slot (0 without a RankSet)
  int local_slot(int slot) const; // that rank's slot for it (the slot itself without a RankSet)
  const ModelConfig& config() const { return model_.config(); }
  std::string backend_name() const { return model_.backend().name(); }
  int64_t max_context() const;  // positions one sequence may reach (the backend's, within the model's)
  int max_sequences() const;    // slots held at once
  int64_t call_tokens() const;  // tokens one Model call takes (a longer chunk or batch is split)
  bool has_peers() const { return peers_ != nullptr; }  // rank 0 of a group (calls are announced)

  // A free slot, its sequence at position 0: over data-parallel ranks on `rank`, or (-1) on the rank
  // holding the fewest sequences (ties: the lowest). Throws dsv4::Error when every slot (of the rank
  // asked) is taken.
  int new_sequence(int rank = -1);
  // Data-parallel: the sequences each rank holds now and the slots it has (one entry without ranks).
  struct RankLoad {
    int held = 0, slots = 0;
  };
  std::vector<RankLoad> rank_loads() const;
  void release(int slot);
  int64_t pos(int slot) const;  // the next position of the slot's sequence
  // The taken slot's state was restored from a snapshot at `pos` (Backend::restore, e.g. by the prefix
  // cache): its sequence continues there.
  void resume_at(int slot, int64_t pos);
  // The taken slot's state after `pos` positions (the MTP blocks' after mtp_pos), from its rank's
  // backend (Backend::snapshot), and the reverse: the slot takes `s` (a snapshot of its rank's backend)
  // and its sequence continues at s.pos. Over data-parallel ranks both run on the slot's rank's thread
  // (its GPU); they make no collective call.
  std::shared_ptr<const SlotSnapshot> snapshot(int slot, int64_t pos, int64_t mtp_pos = 0);
  void restore(int slot, const SlotSnapshot& s);
  KvPageInfo kv_pages(int rank = 0);  // the KV page pool of `rank`'s backend

  // The one split: pieces [begin, end) of a chunk of T tokens, each at most call_tokens().
  std::vector<std::pair<int64_t, int64_t>> pieces(int64_t T) const;
  // The one decision: whether `d` is drawn by the backend's sampler (else by its Sampler, on logits).
  static bool on_backend(const Draw& d);

  // The tokens of the sequence in `slot` at positions pos, pos+1, ... (checked), without logits.
  // `between` is asked after every piece but the last; false stops there (returns false).
  bool feed(int slot, int64_t pos, const std::vector<int32_t>& tokens, const PieceFn& between = {});
  // As feed, with logits [T, V] of every position (all_logits) or [1, V] of the last.
  Tensor prefill(int slot, int64_t pos, const std::vector<int32_t>& tokens, bool all_logits = false);
  // As feed, then the next token drawn into d (d.id; d.error when its Sampler failed). False when
  // `between` stopped the chunk (nothing drawn).
  bool prefill(int slot, int64_t pos, const std::vector<int32_t>& tokens, Draw& d, const PieceFn& between = {});
  // One token for each of B sequences (distinct slots): logits [B, V], row b for items[b].
  Tensor decode(const std::vector<DecodeItem>& items);
  // The same call with the next token of each row drawn into draws[b] (draws.size() == B).
  void decode(const std::vector<DecodeItem>& items, std::vector<Draw>& draws);

  // Data-parallel: fn(x) with `rank`'s runner x, on that rank's thread, while every other rank makes each
  // Model call x's model makes, in order, with 0 tokens (Model::on_call, Model::idle): fn may make any
  // sequence of main-stack and MTP calls (a speculative round, a lane's prefill with its MTP feed) on the
  // rank's own slots (local_slot). Without a RankSet: fn(*this). Rethrows fn's failure. (together with
  // only `rank` making calls.)
  void mirrored(int rank, const std::function<void(Runner& x)>& fn);
  // Data-parallel: fn(r, x) on every rank r at once, each with its own runner x and its own sequence of
  // Model calls (different kinds and lengths, or none), paired into one schedule of steps: before each
  // call a rank posts its kind (Model::on_call); once every rank still running has posted, the step's
  // kind is the lowest such rank's; the ranks that posted that kind make their calls, every other rank an
  // idle call of it (Model::idle), and a rank whose call did not get the step posts it again. A rank whose
  // fn returned idles until all have. Returns the number of steps (at most the sum of the ranks' calls;
  // the longest rank's when their sequences agree). Without a RankSet: fn(0, *this), returns 0. A rank
  // whose fn throws idles through the remaining steps like a finished one; once all are done the first
  // failure in rank order is rethrown.
  int64_t together(const std::function<void(int rank, Runner& x)>& fn);

  // Every Model call the runner makes goes through `fn` first (tests count them). Not thread-safe:
  // set it before the calls start.
  using CallFn = std::function<void(const Batch& b, const StepPlan& plan)>;
  void on_call(CallFn fn) { on_call_ = std::move(fn); }

 private:
  void check(int slot, int64_t pos, int64_t T) const;  // taken, at pos, room for T
  Batch run(int slot, int64_t pos, const std::vector<int32_t>& tokens, int64_t begin, int64_t end) const;
  void step(const Batch& b, const StepPlan& plan);
  void announce(const Batch& b, const StepPlan& plan);  // on_call_ (the model tells the peers)
  // Runs the pieces of a chunk but the last (false: `between` stopped); returns the last's begin.
  bool lead(int slot, int64_t pos, const std::vector<int32_t>& tokens, const PieceFn& between, int64_t& last);
  void draw_host(Draw& d, const float* logits) const;
  void decode_call(const std::vector<DecodeItem>& items, std::vector<Draw>& draws, size_t b0, size_t b1);

  // Data-parallel: one round of calls, `mine` on `owner`'s runner and a call of 0 tokens on the others.
  void round(int owner, const std::function<void(Runner&)>& mine);
  // Data-parallel: `fn` on `owner`'s runner, on its thread; the others make no call.
  void on_rank(int owner, const std::function<void(Runner&)>& fn);
  struct Placed {
    int rank = -1, local = -1;  // rank -1: a free slot
  };
  const Placed& placed(int slot) const;
  // Data-parallel chunk: one round per piece; `piece(x, local, t0, t1)` on the slot's rank.
  bool ranked_chunk(int slot, int64_t pos, const std::vector<int32_t>& tokens, const PieceFn& between,
                    const std::function<void(Runner& x, int local, int64_t t0, int64_t t1)>& piece);
  void ranked_decode(const std::vector<DecodeItem>& items, std::vector<Draw>* draws, Tensor* logits);

  std::unique_ptr<Model> owned_;
  std::unique_ptr<RankPeers> peers_;  // after owned_: stopped before the model goes
  std::unique_ptr<RankSet> ranks_;    // data-parallel ranks; null: this runner's own model
  Model& model_;
  std::vector<int64_t> pos_;  // per slot: the next position; -1 free
  std::vector<Placed> placed_;  // data-parallel: per slot, its rank and that rank's slot
  CallFn on_call_;
};

// One sequence in a slot of a runner, fed from position 0 (generate(), the commands). Releases the slot.
class RunnerSequence {
 public:
  explicit RunnerSequence(Runner& r) : r_(r), slot_(r.new_sequence()) {}
  ~RunnerSequence() { r_.release(slot_); }
  RunnerSequence(const RunnerSequence&) = delete;
  RunnerSequence& operator=(const RunnerSequence&) = delete;

  // Logits [T, V] of every position (all) or [1, V] of the last; advances the position.
  Tensor feed(const std::vector<int32_t>& tokens, bool all = false);
  // Feeds `tokens`, then draws the next token with `sampler` (Runner::on_backend decides where; the
  // Philox step is the number of tokens this sequence drew before). `history`: prompt + generated
  // (penalties). Throws dsv4::Error when the Sampler fails. Returns -1 when `between` stopped the chunk.
  int32_t next(const std::vector<int32_t>& tokens, Sampler& sampler, const std::vector<int32_t>& history,
               Logprobs* lp = nullptr, int top_logprobs = -1, const PieceFn& between = {});
  int64_t pos() const { return pos_; }
  int slot() const { return slot_; }

 private:
  Runner& r_;
  int slot_;
  int64_t pos_ = 0;
  uint64_t drawn_ = 0;
};

// generate() (runtime/generate.h) over a fresh sequence of the runner: the prompt in one chunk (split
// at the runner's call_tokens), then one token per step; stops at the end of the runner's context.
GenerationResult generate(Runner& runner, const Tokenizer& tok, const std::vector<int32_t>& prompt, Sampler& sampler,
                          const StopConditions& stop, int top_logprobs = -1,
                          const std::function<void(const std::string&)>& on_text = {});
// The same over a runner of `model` (tests, tools).
GenerationResult generate(Model& model, const Tokenizer& tok, const std::vector<int32_t>& prompt, Sampler& sampler,
                          const StopConditions& stop, int top_logprobs = -1,
                          const std::function<void(const std::string&)>& on_text = {});

}  // namespace dsv4
