// The DeepSeek-V4 model: its config and a backend (backend/backend.h) holding the weights and the
// sequences' state, and THE forward pass (forward.cpp), written once against the backend's ops: one
// call takes a batch (a prefill chunk, a decode batch: the same call) through embedding, every layer
// (mHC pre, norm, attention, mHC post; the same around the MoE), hc_head, norm and head, and samples
// on the backend when asked. MTP blocks run through the same layer code (MODEL.md §8).
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "core/tensor.h"
#include "io/config.h"
#include "io/weights.h"

namespace dsv4 {

// What one call computes besides the layers.
struct StepPlan {
  int64_t layers = -1;                    // main layers (-1: all; benchmarks time prefixes)
  int64_t head_first = 0, head_rows = 0;  // logits of these rows of the call (0 rows: no head)
  bool sample = false;                    // sample the head rows on the backend (set_sampling first)
  bool graph = true;                      // the backend may capture the call into a graph
};

// Options of Model::forward, the one-sequence convenience (fixtures, `dsv4 logits`).
struct ForwardOptions {
  bool all_logits = true;                // logits for every position of the chunk (else only the last)
  std::vector<Tensor>* hidden = nullptr;  // if set: streams at each layer boundary (fixtures' hidden_i)
  Tensor* streams = nullptr;              // if set: the last layer's output streams [T, n, D] (MTP input)
};

// A call of the model as the other ranks of an expert-parallel group must mirror it (runtime/rank_group.h):
// the main stack, or MTP block `block`.
struct ModelCall {
  bool mtp = false;
  int64_t block = 0;    // mtp: which MTP block
  int64_t layers = -1;  // main stack: its first `layers` layers (StepPlan::layers; -1: all)
  bool operator==(const ModelCall& o) const {
    return mtp == o.mtp && (mtp ? block == o.block : layers == o.layers);
  }
};

class Model {
 public:
  // config.json + safetensors of a model directory (mmapped; the backend copies what it keeps).
  static std::unique_ptr<Model> load(const std::string& dir, const BackendOptions& o, const LoadProgress& progress = {});
  // The CPU backend in `numerics` with room for any number of sequences (tests, tools).
  static std::unique_ptr<Model> load(const std::string& dir, Numerics numerics, const LoadProgress& progress = {});
  // Random weights in the checkpoint formats for cfg (presets, benchmarks: io/dummy_weights.h).
  static std::unique_ptr<Model> dummy(const ModelConfig& cfg, const BackendOptions& o, uint64_t seed = 1234,
                                      const LoadProgress& progress = {});
  Model(ModelConfig cfg, const Weights& w, uint64_t total_bytes, const BackendOptions& o,
        const LoadProgress& progress = {});

  const ModelConfig& config() const { return cfg_; }
  Backend& backend() { return *be_; }
  const Backend& backend() const { return *be_; }
  Numerics numerics() const { return be_->numerics(); }
  int64_t num_mtp() const { return be_->num_mtp(); }

  // THE call: the batch through the model; the head over plan.head_* rows (read them with
  // backend().logits / sampled). Batch sizes up to backend().capacity().max_tokens.
  void step(const Batch& b, const StepPlan& plan);
  // The same call again on the inputs step(b, ...) uploaded last (benchmarks: a decode step's graph
  // replayed without re-uploading ids / positions / slots). The slots' state is rewritten in place.
  void replay(const Batch& b, const StepPlan& plan);
  // MTP block k on a batch: ids are the tokens that follow the main positions whose last-layer
  // streams S [T, n, D] are given; positions are the block's own (its window ring), logits of every row.
  void step_mtp(const Batch& b, const Tensor& S, int64_t k);

  // One sequence in `slot`, a chunk at positions pos.. (split at the backend's max_tokens): logits
  // [T, V] of every position (opt.all_logits) or [1, V] of the last.
  Tensor forward(int slot, int64_t pos, const std::vector<int32_t>& tokens, const ForwardOptions& opt = {});
  // MTP block k for one sequence: inputs are the main model's last-layer streams S [T, n, D] at
  // positions pos.. of the block and the ids of the tokens that follow them. Returns logits [T, V].
  Tensor forward_mtp(int slot, int64_t pos, const Tensor& S, const std::vector<int32_t>& next_ids, int64_t k = 0);

  // Called before every call that runs the layers (step, replay, each chunk of forward, step_mtp), with
  // its kind: rank 0 of an expert-parallel group tells the other ranks, which make the same kind of call
  // with 0 tokens (their MoE layers take part in the collectives), whoever drives this model (a runner,
  // a speculative decoder, `dsv4 logits --mtp`). Set (or cleared with {}) between calls, on the thread
  // that makes them. It runs before the call touches the backend, so it may itself make calls of this
  // model first (Runner::together's idle steps).
  void on_call(std::function<void(const ModelCall&)> fn) { on_call_ = std::move(fn); }
  // A call of kind `c` with 0 tokens: a rank of an expert-parallel group with no rows of its own takes
  // part in the MoE layers' collectives of another rank's call of that kind.
  void idle(const ModelCall& c = {});

 private:
  void announce(const ModelCall& c) {
    if (on_call_) on_call_(c);
  }
  void body(const StepPlan& plan, const ForwardOptions* capture);  // the batch is the backend's (begin)
  void run(const Batch& b, const StepPlan& plan);  // the begun batch b through the layers (step, replay)
  ModelCall call_of(const StepPlan& plan) const;   // the main-stack call a plan makes (its layers)
  void check_plan(const Batch& b, const StepPlan& plan) const;
  void block(int64_t layer, const LayerSpec& spec, bool last);
  Tensor logits_of(const Batch& b, int64_t head, bool all);  // head over the call's rows, in pieces

  ModelConfig cfg_;
  std::unique_ptr<Backend> be_;
  std::function<void(const ModelCall&)> on_call_;
};

// A sequence of a model in one slot, fed chunk by chunk (tests, `dsv4 logits`, perplexity).
class Sequence {
 public:
  explicit Sequence(Model& m, int slot = 0) : m_(m), slot_(slot) {}
  // Logits of the chunk (see Model::forward); advances the position.
  Tensor forward(const std::vector<int32_t>& tokens, const ForwardOptions& opt = {}) {
    Tensor l = m_.forward(slot_, pos_, tokens, opt);
    pos_ += int64_t(tokens.size());
    return l;
  }
  Tensor forward_mtp(const Tensor& S, const std::vector<int32_t>& next_ids, int64_t k = 0) {
    Tensor l = m_.forward_mtp(slot_, mtp_pos_, S, next_ids, k);
    mtp_pos_ += int64_t(next_ids.size());
    return l;
  }
  int64_t pos() const { return pos_; }
  int slot() const { return slot_; }

 private:
  Model& m_;
  int slot_;
  int64_t pos_ = 0, mtp_pos_ = 0;
};

}  // namespace dsv4
