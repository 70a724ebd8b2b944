// The calls the rank-group tests make through a Runner (tests/runtime/test_rank_group*.cpp): every
// position's logits of sequence A (pieces of at most the capacity's tokens through Model::forward), the
// last logits of B (pieces through Model::step), then 4 decode batches of A and B with A drawn greedily
// on the backend and B by a host Sampler with a repeat penalty.
#pragma once
#include <cstdint>
#include <vector>

#include "runtime/runner.h"
#include "runtime/sampler.h"

namespace dsv4::test {

inline std::vector<int32_t> prompt(int n, int32_t from) {
  std::vector<int32_t> v;
  for (int i = 0; i < n; ++i) v.push_back(int32_t((from + 37 * i + i * i) % 1000));
  return v;
}

struct Outcome {
  std::vector<float> logits;
  std::vector<int32_t> ids;
  bool operator==(const Outcome&) const = default;
};

inline Outcome drive(Runner& r) {
  Outcome o;
  const int a = r.new_sequence(), b = r.new_sequence();
  const auto pa = prompt(12, 5), pb = prompt(7, 11);
  Tensor la = r.prefill(a, 0, pa, true), lb = r.prefill(b, 0, pb);
  o.logits.insert(o.logits.end(), la.data.begin(), la.data.end());
  o.logits.insert(o.logits.end(), lb.data.begin(), lb.data.end());
  SamplingParams g, p;
  g.temperature = p.temperature = 0.0f;
  p.repetition_penalty = 1.3f;
  Sampler greedy(g), penal(p);
  std::vector<int32_t> hist_b = pb;
  int32_t ta = 7, tb = 9;
  for (int s = 0; s < 4; ++s) {
    std::vector<Draw> d = {{.sampler = &greedy, .step = uint64_t(s)}, {.sampler = &penal, .history = &hist_b, .step = uint64_t(s)}};
    r.decode({{.slot = a, .token = ta, .pos = int64_t(pa.size()) + s}, {.slot = b, .token = tb, .pos = int64_t(pb.size()) + s}}, d);
    ta = d[0].id;
    tb = d[1].id;
    hist_b.push_back(tb);
    o.ids.push_back(ta);
    o.ids.push_back(tb);
  }
  return o;
}

}  // namespace dsv4::test
