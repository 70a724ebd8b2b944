// CudaStepModel: the runtime's StepModel (runtime/step_model.h) on the GPU. Slots are CudaModel state
// slots; a prefill chunk is CudaModel::forward (split at max_tokens), a decode batch is ONE
// CudaModel::decode_step (the CUDA graph of batch B). Official numerics only.
//
// Samples on the device (samples_on_device): decode_sampled is ONE CudaModel::decode_sample (the
// graph of batch B ends with sample_tokens; B int32 ids come back), prefill_sampled samples the last
// position after the chunk. Host rows (penalties, logprobs: the caller's Sampler) are sampled greedily
// on the device too, then their logits rows are downloaded.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "model_cuda/cuda_model.h"
#include "runtime/step_model.h"

namespace dsv4::cuda {

class CudaStepModel : public StepModel {
 public:
  explicit CudaStepModel(std::unique_ptr<CudaModel> model);
  // CudaModel::load(dir, {max_seqs, max_ctx, max_tokens, kernels}).
  static std::unique_ptr<CudaStepModel> load(const std::string& dir, int max_seqs, int64_t max_ctx, int64_t max_tokens,
                                             const LoadProgress& progress = {}, KernelTier kernels = KernelTier::Exact);
  CudaModel& model() { return *model_; }

  const ModelConfig& config() const override { return model_->config(); }
  int64_t max_context() const override { return model_->options().max_ctx; }
  int max_sequences() const override { return int(model_->options().max_seqs); }
  int new_sequence() override;
  void release(int slot) override;
  Tensor prefill(int slot, int64_t pos, const std::vector<int32_t>& tokens, bool all_logits = false) override;
  Tensor decode(const std::vector<DecodeItem>& items) override;
  bool samples_on_device() const override { return true; }
  SampledStep decode_sampled(const std::vector<DecodeItem>& items, const std::vector<RowSampling>& rows) override;
  SampledStep prefill_sampled(int slot, int64_t pos, const std::vector<int32_t>& tokens, const RowSampling& row) override;

 private:
  void batch_inputs(const std::vector<DecodeItem>& items, std::vector<int32_t>& ids, std::vector<int32_t>& slots,
                    std::vector<int32_t>& positions) const;
  void check(int slot, int64_t pos, int64_t T) const;

  std::unique_ptr<CudaModel> model_;
  std::vector<bool> taken_;
};

}  // namespace dsv4::cuda
