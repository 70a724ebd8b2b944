#include "backend/cpu/sampling.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <utility>
#include <vector>

#include "core/philox.h"

namespace dsv4::cpu {

int32_t sample_philox(const float* z, int64_t vocab, const SampleRow& p) {
  auto allowed = [&](int64_t i) { return !p.mask || ((p.mask[i >> 5] >> (i & 31)) & 1u); };
  if (!p.mask && (p.temperature <= 0 || p.top_k == 1)) return int32_t(std::max_element(z, z + vocab) - z);
  std::vector<int32_t> ids;
  if (p.mask) {
    for (int64_t i = 0; i < vocab; ++i)
      if (allowed(i) && !std::isnan(z[i])) ids.push_back(int32_t(i));
    if (ids.empty()) return -1;
    if (p.temperature <= 0 || p.top_k == 1) {  // the first maximum among the allowed ids
      int32_t best = ids[0];
      for (int32_t i : ids)
        if (z[i] > z[best]) best = i;
      return best;
    }
  } else {
    ids.resize(static_cast<size_t>(vocab));
    std::iota(ids.begin(), ids.end(), 0);
  }
  const int64_t n_ids = int64_t(ids.size());
  const int64_t keep = p.top_k > 0 ? std::min<int64_t>(p.top_k, n_ids) : n_ids;
  auto by_logit = [&](int32_t a, int32_t b) { return z[a] != z[b] ? z[a] > z[b] : a < b; };
  std::partial_sort(ids.begin(), ids.begin() + keep, ids.end(), by_logit);
  ids.resize(static_cast<size_t>(keep));
  const double mx = z[ids[0]] / p.temperature;
  std::vector<double> prob(ids.size());  // relative to the most likely (weight 1)
  double sum = 0;
  for (size_t i = 0; i < ids.size(); ++i) sum += prob[i] = std::exp(z[ids[i]] / p.temperature - mx);
  size_t n = ids.size();
  if (p.top_p < 1) {
    double cum = 0;
    for (size_t i = 0; i < n; ++i)
      if ((cum += prob[i]) >= p.top_p * sum) {
        n = i + 1;
        break;
      }
    while (n < ids.size() && z[ids[n]] == z[ids[n - 1]]) ++n;  // ties at the cut are kept
  }
  if (p.min_p > 0) {
    size_t m = 1;
    while (m < n && prob[m] >= p.min_p) ++m;
    n = m;
  }
  std::vector<std::pair<int32_t, double>> kept;
  for (size_t i = 0; i < n; ++i) kept.emplace_back(ids[i], prob[i]);
  std::sort(kept.begin(), kept.end());
  double total = 0;
  for (const auto& k : kept) total += k.second;
  const double u = philox_uniform(p.seed, p.step) * total;
  double cum = 0;
  for (const auto& [id, q] : kept)
    if (u < (cum += q)) return id;
  return kept.back().first;
}

}  // namespace dsv4::cpu
