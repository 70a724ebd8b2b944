// --device cpu|cuda on the computing commands, and the CUDA model behind `run` and `logits`.
// Default ("auto"): cuda when this is a CUDA build and a Hopper GPU is present, else cpu. Commands whose
// CUDA path does not exist yet (chat, perplexity, serve) resolve "auto" to cpu and refuse an explicit
// "cuda" with a one-line error.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "io/config.h"
#include "model/cpu_weights.h"

namespace CLI {
class App;
}

namespace dsv4::cli {

void add_device_option(CLI::App& c, std::string& device);  // --device, default "auto"
// True when `command` runs on the GPU. `supported`: whether that command has a CUDA path.
bool use_cuda(const std::string& device, const char* command, bool supported = true);
bool cuda_available();  // CUDA build and a Hopper device

// A CUDA model of one sequence (slot 0), fed chunk by chunk like SequenceState + Model::forward.
class CudaSequence {
 public:
  // max_ctx: positions the sequence may reach; chunk: largest chunk fed at once (longer ones are split).
  CudaSequence(const std::string& dir, int64_t max_ctx, int64_t chunk, const LoadProgress& progress);
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
