// The model on either backend along token sequences (tests/model_cuda): the CUDA model in a kernel tier,
// the fixtures' logits_steps schedule through the runner's calls (a prefill chunk, then one decode step
// per token with the head inside the step: the CUDA backend's decode graph), and greedy runs with the
// margins of each pick.
#pragma once
#include <algorithm>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "model/model.h"

namespace dsv4::test {

inline std::unique_ptr<Model> load_cuda(const std::string& dir, KernelTier tier, int64_t max_ctx, int64_t max_tokens,
                                        int64_t max_seqs = 1, bool graphs = true, bool overlap = true) {
  return Model::load(dir, BackendOptions{.device = Device::Cuda,
                                         .kernels = tier,
                                         .capacity = {.max_seqs = max_seqs, .max_ctx = max_ctx, .max_tokens = max_tokens},
                                         .graphs = graphs,
                                         .overlap = overlap});
}

// One decode step of one sequence: token `id` at `pos` of `slot`, the head over its row; the logits [1, V].
inline Tensor decode_step(Model& m, int32_t id, int64_t pos, int slot = 0) {
  const Batch b{.ids = {id}, .positions = {int32_t(pos)}, .slots = {slot}, .run_len = 1};
  m.step(b, StepPlan{.head_first = 0, .head_rows = 1});
  return m.backend().logits(1);
}

// Logits of positions P-1 .. n-1 after a prefill of P tokens, then one decode step per token.
inline Tensor decode_steps(Model& m, const std::vector<int32_t>& ids, int64_t P) {
  const int64_t n = int64_t(ids.size()), V = m.config().vocab_size;
  Tensor out({n - P + 1, V});
  Sequence seq(m);
  Tensor l = seq.forward(std::vector<int32_t>(ids.begin(), ids.begin() + P), ForwardOptions{.all_logits = false});
  std::copy(l.data.begin(), l.data.end(), out.row(0));
  for (int64_t t = P; t < n; ++t) {
    l = decode_step(m, ids[size_t(t)], t);
    std::copy(l.data.begin(), l.data.end(), out.row(t - P + 1));
  }
  return out;
}

inline int32_t argmax(const float* row, int64_t V) { return int32_t(std::max_element(row, row + V) - row); }

// A greedy run: the ids and the logits each came from.
struct Greedy {
  std::vector<int32_t> ids;
  std::vector<Tensor> logits;  // [1, V] per id
};
inline Greedy greedy(Model& m, const std::vector<int32_t>& prompt, int64_t N) {
  Greedy g;
  const int64_t V = m.config().vocab_size;
  Sequence seq(m);
  Tensor l = seq.forward(prompt, ForwardOptions{.all_logits = false});
  for (int64_t i = 0; i < N; ++i) {
    g.ids.push_back(argmax(l.ptr(), V));
    g.logits.push_back(l);
    if (i + 1 < N) l = decode_step(m, g.ids.back(), int64_t(prompt.size()) + i);
  }
  return g;
}

// Where two greedy runs first part (a.size() when they never do).
inline size_t first_divergence(const std::vector<int32_t>& a, const std::vector<int32_t>& b) {
  size_t i = 0;
  while (i < a.size() && i < b.size() && a[i] == b[i]) ++i;
  return i;
}

}  // namespace dsv4::test
