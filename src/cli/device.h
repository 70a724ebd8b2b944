// --device cpu|cuda on the computing commands, and the CUDA model behind `run` and `logits`.
// Default ("auto"): cuda when this is a CUDA build and a Hopper GPU is present, else cpu. Commands whose
// CUDA path does not exist yet (run --chat, logits --mtp) refuse "cuda" with a one-line error.
// chat, perplexity and serve run on a StepModel (runtime/step_model.h) made by load_step_model.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "io/config.h"
#include "backend/cpu/cpu_weights.h"
#include "runtime/step_model.h"

namespace CLI {
class App;
}

namespace dsv4::cli {

// --device (default "auto") and --kernels fast|exact (default "fast": the CUDA model's linears, docs/cuda.md
// "Kernel tiers"; exact is bit-identical to the CPU; the CPU has one tier and ignores it).
void add_device_option(CLI::App& c, std::string& device, std::string& kernels);
// True when `command` runs on the GPU. `supported`: whether that command has a CUDA path.
bool use_cuda(const std::string& device, const char* command, bool supported = true);
bool cuda_available();  // CUDA build and a Hopper device
// The one error of every command that needs the GPU: "dsv4 COMMAND: this dsv4 was built without CUDA"
// or "dsv4 COMMAND: no Hopper (sm_90) GPU found".
void require_cuda(const char* command);

// Positions per sequence of a CUDA model when the command does not say (the model's context capped
// here: the GPU state is allocated for the whole context of every slot).
constexpr int64_t kCudaDefaultContext = 4096;

// The model behind chat / perplexity / serve: on the CPU a CpuStepModel (numerics as given), on cuda a
// CudaStepModel (official numerics only) of `max_seqs` slots, `max_ctx` positions each (0: the model's
// capped at kCudaDefaultContext) and prefill calls of up to `chunk` tokens.
std::unique_ptr<StepModel> load_step_model(const std::string& dir, bool cuda, const std::string& numerics,
                                           int max_seqs, int64_t max_ctx, int64_t chunk,
                                           const LoadProgress& progress, const std::string& kernels);

// A CUDA model of one sequence (slot 0), fed chunk by chunk like SequenceState + Model::forward.
class CudaSequence {
 public:
  // max_ctx: positions the sequence may reach; chunk: largest chunk fed at once (longer ones are split).
  CudaSequence(const std::string& dir, int64_t max_ctx, int64_t chunk, const LoadProgress& progress,
               const std::string& kernels);
  ~CudaSequence();
  const ModelConfig& config() const;
  // Logits [T, V] of every position of `tokens` (all) or of the last [1, V]; advances the position.
  // Single tokens go through the decode step (CUDA graph).
  Tensor feed(const std::vector<int32_t>& tokens, bool all);
  int64_t pos() const { return pos_; }

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  int64_t pos_ = 0;
};

}  // namespace dsv4::cli
