// StepModel: the backend a generation loop or the engine drives, one call per step. Sequences live in
// slots; a slot's sequence is fed a chunk at a time (prefill) or joins a batch of sequences that each
// take one token (decode). Positions are the caller's: a sequence fed at p, p+1, ... (a fresh slot
// starts at 0).
//
// CpuStepModel wraps the CPU Model with one SequenceState per slot (a decode batch runs its sequences
// one after another, so every sequence's logits are those of a lone Model::forward, bit for bit).
// The CUDA one (model_cuda/cuda_step_model.h) runs a decode batch as one CUDA-graph step.
//
// Sampling in the model: decode_sampled / prefill_sampled return the next token of each row instead
// of its logits. On cuda (samples_on_device) the GPU samples right after the head, inside the decode
// step's graph, and only B int32 ids cross PCIe; rows marked `host` (what the GPU sampler does not do:
// repetition / presence / frequency penalties, logprobs) get their logits back and the caller samples
// them with its Sampler. The default implementation (CPU) computes the logits and samples the other
// rows on the host with sample_philox, the GPU sampler's CPU twin (runtime/sampler.h).
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "core/tensor.h"
#include "io/config.h"
#include "model/model.h"
#include "runtime/generate.h"

namespace dsv4 {

struct DecodeItem {
  int slot = 0;
  int32_t token = 0;
  int64_t pos = 0;  // the token's position in its sequence
};

// Per-row sampling of the *_sampled calls.
struct RowSampling {
  SamplingParams params;  // temperature, top-k, top-p, min-p, seed (the penalties are ignored)
  uint64_t step = 0;      // the draw's Philox counter: tokens this sequence sampled before
  bool host = false;      // the caller samples this row itself: its logits come back
};

struct SampledStep {
  std::vector<int32_t> ids;  // [B] the sampled id of each row; -1 for host rows
  Tensor logits;             // [B, V] with the host rows' logits (other rows unspecified); empty when
                             // no row is host (the default implementation always fills it)
};

class StepModel {
 public:
  virtual ~StepModel() = default;
  virtual const ModelConfig& config() const = 0;
  virtual int64_t max_context() const = 0;  // positions one sequence may reach
  virtual int max_sequences() const = 0;    // slots held at once
  // A free slot, its sequence at position 0. Throws dsv4::Error when every slot is taken.
  virtual int new_sequence() = 0;
  virtual void release(int slot) = 0;
  // Feeds `tokens` of the sequence in `slot` at positions pos, pos+1, ...: logits [T, V] (all_logits)
  // or [1, V] of the last position.
  virtual Tensor prefill(int slot, int64_t pos, const std::vector<int32_t>& tokens, bool all_logits = false) = 0;
  // One token for each of B sequences (distinct slots): logits [B, V], row b for items[b].
  virtual Tensor decode(const std::vector<DecodeItem>& items) = 0;

  // True when the *_sampled calls sample on the device (callers then prefer them to logits + Sampler).
  virtual bool samples_on_device() const { return false; }
  // decode with sampling: rows[b] for items[b].
  virtual SampledStep decode_sampled(const std::vector<DecodeItem>& items, const std::vector<RowSampling>& rows);
  // prefill (logits of the last position) with sampling: ids [1].
  virtual SampledStep prefill_sampled(int slot, int64_t pos, const std::vector<int32_t>& tokens, const RowSampling& row);
};

class CpuStepModel : public StepModel {
 public:
  explicit CpuStepModel(const Model& model, int max_seqs = 1 << 20);  // `model` outlives this
  explicit CpuStepModel(std::unique_ptr<Model> model, int max_seqs = 1 << 20);
  const Model& model() const { return model_; }

  const ModelConfig& config() const override { return model_.config(); }
  int64_t max_context() const override { return model_.config().max_position_embeddings; }
  int max_sequences() const override { return max_seqs_; }
  int new_sequence() override;
  void release(int slot) override;
  Tensor prefill(int slot, int64_t pos, const std::vector<int32_t>& tokens, bool all_logits = false) override;
  Tensor decode(const std::vector<DecodeItem>& items) override;

 private:
  SequenceState& state(int slot, int64_t pos);  // checks the slot is taken and at `pos`

  std::unique_ptr<Model> owned_;
  const Model& model_;
  int max_seqs_;
  std::vector<std::unique_ptr<SequenceState>> slots_;  // null: free
};

// One sequence in a slot of a StepModel, fed like SequenceState + Model::forward: single tokens go
// through decode, longer chunks through prefill (split at `chunk` tokens). Releases the slot.
class StepSequence {
 public:
  StepSequence(StepModel& m, int64_t chunk = 256);
  ~StepSequence();
  StepSequence(const StepSequence&) = delete;
  StepSequence& operator=(const StepSequence&) = delete;

  // Logits [T, V] of every position (all) or [1, V] of the last; advances the position.
  Tensor feed(const std::vector<int32_t>& tokens, bool all = false);
  // As feed, then the next token sampled in the model (StepModel::*_sampled; row.host is ignored).
  int32_t feed_sampled(const std::vector<int32_t>& tokens, const RowSampling& row);
  int64_t pos() const { return pos_; }

 private:
  StepModel& m_;
  int slot_;
  int64_t chunk_, pos_ = 0;
};

// generate() over a fresh sequence of a StepModel. When the model samples on the device and the
// request allows it (device_samplable(sampler.params()), no logprobs), the tokens are sampled there
// (Philox(seed, step) draw, step = tokens generated before); otherwise logits come back and `sampler`
// draws.
GenerationResult generate(StepModel& model, const Tokenizer& tok, const std::vector<int32_t>& prompt,
                          Sampler& sampler, const StopConditions& stop, int top_logprobs = -1,
                          const std::function<void(const std::string&)>& on_text = {});

}  // namespace dsv4
