// The fixtures' logits_steps schedule on the CPU model: logits of positions P-1 .. n-1 after a prefill
// of P tokens, then one token per step (fixtures/README.md).
#pragma once
#include <algorithm>
#include <cstdint>
#include <vector>

#include "model/model.h"

namespace dsv4::test {

inline Tensor logits_steps(Model& m, const std::vector<int32_t>& ids, int64_t P) {
  Sequence st(m);
  const int64_t n = int64_t(ids.size()), V = m.config().vocab_size;
  Tensor out({n - P + 1, V});
  ForwardOptions last;
  last.all_logits = false;
  Tensor l = st.forward(std::vector<int32_t>(ids.begin(), ids.begin() + P), last);
  std::copy(l.data.begin(), l.data.end(), out.row(0));
  for (int64_t t = P; t < n; ++t) {
    l = st.forward({ids[size_t(t)]}, last);
    std::copy(l.data.begin(), l.data.end(), out.row(t - P + 1));
  }
  return out;
}

}  // namespace dsv4::test
