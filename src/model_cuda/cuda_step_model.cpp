#include "model_cuda/cuda_step_model.h"

#include <algorithm>

#include "core/error.h"

namespace dsv4::cuda {

CudaStepModel::CudaStepModel(std::unique_ptr<CudaModel> model)
    : model_(std::move(model)), taken_(size_t(model_->options().max_seqs), false) {}

std::unique_ptr<CudaStepModel> CudaStepModel::load(const std::string& dir, int max_seqs, int64_t max_ctx,
                                                   int64_t max_tokens, const LoadProgress& progress,
                                                   KernelTier kernels) {
  CudaModelOptions o;
  o.max_seqs = std::max(1, max_seqs);
  o.max_ctx = std::max<int64_t>(1, max_ctx);
  o.max_tokens = std::max<int64_t>(1, max_tokens);
  o.kernels = kernels;
  return std::make_unique<CudaStepModel>(CudaModel::load(dir, o, progress));
}

int CudaStepModel::new_sequence() {
  // A slot restarts its sequence at position 0 (CudaModel keeps no per-slot state to reset).
  for (size_t i = 0; i < taken_.size(); ++i)
    if (!taken_[i]) {
      taken_[i] = true;
      return int(i);
    }
  fail("all ", taken_.size(), " sequence slots of the CUDA model are taken");
}

void CudaStepModel::release(int slot) {
  if (slot >= 0 && size_t(slot) < taken_.size()) taken_[size_t(slot)] = false;
}

void CudaStepModel::check(int slot, int64_t pos, int64_t T) const {
  if (slot < 0 || size_t(slot) >= taken_.size() || !taken_[size_t(slot)]) fail("sequence slot ", slot, " is not taken");
  if (pos < 0 || pos + T > max_context())
    fail("the sequence would reach ", pos + T, " positions; this CUDA model holds ", max_context(),
         " (--max-model-len / --ctx)");
}

Tensor CudaStepModel::prefill(int slot, int64_t pos, const std::vector<int32_t>& tokens, bool all_logits) {
  const int64_t T = int64_t(tokens.size()), V = config().vocab_size, chunk = model_->options().max_tokens;
  if (T == 0) fail("forward: empty chunk");
  check(slot, pos, T);
  if (T <= chunk) return model_->forward(slot, pos, tokens, all_logits);
  Tensor out({all_logits ? T : 1, V});
  for (int64_t t0 = 0; t0 < T; t0 += chunk) {
    const std::vector<int32_t> part(tokens.begin() + t0, tokens.begin() + std::min(T, t0 + chunk));
    const int64_t n = int64_t(part.size());
    Tensor l = model_->forward(slot, pos + t0, part, all_logits);
    if (all_logits)
      std::copy(l.data.begin(), l.data.end(), out.row(t0));
    else if (t0 + n == T)
      std::copy(l.data.end() - V, l.data.end(), out.row(0));
  }
  return out;
}

void CudaStepModel::batch_inputs(const std::vector<DecodeItem>& items, std::vector<int32_t>& ids,
                                 std::vector<int32_t>& slots, std::vector<int32_t>& positions) const {
  if (items.empty()) fail("decode: empty batch");
  for (const DecodeItem& it : items) {
    check(it.slot, it.pos, 1);
    ids.push_back(it.token);
    slots.push_back(it.slot);
    positions.push_back(int32_t(it.pos));
  }
}

Tensor CudaStepModel::decode(const std::vector<DecodeItem>& items) {
  std::vector<int32_t> ids, slots, positions;
  batch_inputs(items, ids, slots, positions);
  return model_->decode_step(ids, slots, positions);
}

namespace {

SampleRow device_row(const RowSampling& r) {
  SampleRow d;
  if (r.host) return d;  // greedy: cheap, and the caller draws from the logits
  d.temperature = r.params.temperature;
  d.top_k = r.params.top_k;
  d.top_p = r.params.top_p;
  d.min_p = r.params.min_p;
  d.seed = r.params.seed;
  d.step = r.step;
  return d;
}

}  // namespace

SampledStep CudaStepModel::decode_sampled(const std::vector<DecodeItem>& items, const std::vector<RowSampling>& rows) {
  if (rows.size() != items.size()) fail("decode_sampled: ", items.size(), " items but ", rows.size(), " rows");
  std::vector<int32_t> ids, slots, positions;
  batch_inputs(items, ids, slots, positions);
  std::vector<SampleRow> dev;
  std::vector<int64_t> host;
  for (size_t b = 0; b < rows.size(); ++b) {
    dev.push_back(device_row(rows[b]));
    if (rows[b].host) host.push_back(int64_t(b));
  }
  SampledStep r;
  r.ids = model_->decode_sample(ids, slots, positions, dev);
  if (!host.empty()) {
    const int64_t V = config().vocab_size;
    const Tensor part = model_->logits_rows(host);
    r.logits = Tensor({int64_t(rows.size()), V});
    for (size_t i = 0; i < host.size(); ++i) {
      std::copy(part.row(int64_t(i)), part.row(int64_t(i)) + V, r.logits.row(host[i]));
      r.ids[size_t(host[i])] = -1;
    }
  }
  return r;
}

SampledStep CudaStepModel::prefill_sampled(int slot, int64_t pos, const std::vector<int32_t>& tokens,
                                           const RowSampling& row) {
  SampledStep r;
  if (row.host) {
    r.logits = prefill(slot, pos, tokens, false);
    r.ids.push_back(-1);
    return r;
  }
  const int64_t T = int64_t(tokens.size()), chunk = model_->options().max_tokens;
  if (T == 0) fail("forward: empty chunk");
  check(slot, pos, T);
  int64_t t0 = 0;
  for (; T - t0 > chunk; t0 += chunk)  // leading chunks: no logits needed
    model_->forward_async(slot, pos + t0, std::vector<int32_t>(tokens.begin() + t0, tokens.begin() + t0 + chunk));
  r.ids.push_back(model_->forward_sample(slot, pos + t0, std::vector<int32_t>(tokens.begin() + t0, tokens.end()),
                                         device_row(row)));
  return r;
}

}  // namespace dsv4::cuda
