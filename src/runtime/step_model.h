// StepModel: the backend a generation loop or the engine drives, one call per step. Sequences live in
// slots; a slot's sequence is fed a chunk at a time (prefill) or joins a batch of sequences that each
// take one token (decode). Positions are the caller's: a sequence fed at p, p+1, ... (a fresh slot
// starts at 0).
//
// CpuStepModel wraps the CPU Model with one SequenceState per slot (a decode batch runs its sequences
// one after another, so every sequence's logits are those of a lone Model::forward, bit for bit).
// The CUDA one (model_cuda/cuda_step_model.h) runs a decode batch as one CUDA-graph step.
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
  int64_t pos() const { return pos_; }

 private:
  StepModel& m_;
  int slot_;
  int64_t chunk_, pos_ = 0;
};

// generate() over a fresh sequence of a StepModel.
GenerationResult generate(StepModel& model, const Tokenizer& tok, const std::vector<int32_t>& prompt,
                          Sampler& sampler, const StopConditions& stop, int top_logprobs = -1,
                          const std::function<void(const std::string&)>& on_text = {});

}  // namespace dsv4
