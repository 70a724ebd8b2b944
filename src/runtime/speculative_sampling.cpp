#include "runtime/speculative_sampling.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "core/error.h"

namespace dsv4 {

TokenDistribution sampling_distribution(const float* z, int64_t vocab, const SamplingParams& p) {
  if (vocab < 1) fail("sampling: an empty logits row");
  TokenDistribution out(static_cast<size_t>(vocab), 0.0);
  if (p.temperature <= 0 || p.top_k == 1) {
    out[size_t(std::max_element(z, z + vocab) - z)] = 1;  // the first maximum
    return out;
  }
  // The backend sampler's cut (backend/cpu/sampling.cpp), step for step, so that both describe one
  // distribution: sorted candidates, top-k, weights relative to the most likely, top-p on the
  // unnormalized weights with the ties at the cut kept, min-p.
  std::vector<int32_t> ids(static_cast<size_t>(vocab));
  std::iota(ids.begin(), ids.end(), 0);
  const int64_t keep = p.top_k > 0 ? std::min<int64_t>(p.top_k, vocab) : vocab;
  auto by_logit = [&](int32_t a, int32_t b) { return z[a] != z[b] ? z[a] > z[b] : a < b; };
  std::partial_sort(ids.begin(), ids.begin() + keep, ids.end(), by_logit);
  ids.resize(static_cast<size_t>(keep));
  const double mx = z[ids[0]] / p.temperature;
  std::vector<double> w(ids.size());
  double sum = 0;
  for (size_t i = 0; i < ids.size(); ++i) sum += w[i] = std::exp(z[ids[i]] / p.temperature - mx);
  size_t n = ids.size();
  if (p.top_p < 1) {
    double cum = 0;
    for (size_t i = 0; i < n; ++i)
      if ((cum += w[i]) >= p.top_p * sum) {
        n = i + 1;
        break;
      }
    while (n < ids.size() && z[ids[n]] == z[ids[n - 1]]) ++n;
  }
  if (p.min_p > 0) {
    size_t m = 1;
    while (m < n && w[m] >= p.min_p) ++m;
    n = m;
  }
  double total = 0;
  for (size_t i = 0; i < n; ++i) total += w[i];
  for (size_t i = 0; i < n; ++i) out[size_t(ids[i])] = w[i] / total;
  return out;
}

int32_t draw_token(const TokenDistribution& d, double u) {
  const double total = std::accumulate(d.begin(), d.end(), 0.0);
  if (!(total > 0)) fail("sampling: a distribution without mass");
  const double target = u * total;
  double cum = 0;
  int32_t last = -1;
  for (size_t i = 0; i < d.size(); ++i) {
    if (d[i] <= 0) continue;
    last = int32_t(i);
    if (target < (cum += d[i])) return last;
  }
  return last;  // u * total rounded up to the total
}

double acceptance_probability(const TokenDistribution& p, const TokenDistribution& q, int32_t draft) {
  const double pd = p.at(size_t(draft)), qd = q.at(size_t(draft));
  if (qd <= 0) return pd > 0 ? 1 : 0;
  return std::min(1.0, pd / qd);
}

TokenDistribution residual_distribution(const TokenDistribution& p, const TokenDistribution& q) {
  if (p.size() != q.size()) fail("sampling: distributions over ", p.size(), " and ", q.size(), " ids");
  TokenDistribution r(p.size());
  double total = 0;
  for (size_t i = 0; i < p.size(); ++i) total += r[i] = std::max(0.0, p[i] - q[i]);
  if (!(total > 0)) return p;
  for (double& x : r) x /= total;
  return r;
}

DraftVerdict judge_draft(const TokenDistribution& p, const TokenDistribution& q, int32_t draft, double u_accept,
                         double u_residual) {
  if (draft < 0 || size_t(draft) >= p.size()) fail("sampling: draft id ", draft, " outside [0, ", p.size(), ")");
  if (u_accept < acceptance_probability(p, q, draft)) return {.accepted = true, .token = draft};
  return {.accepted = false, .token = draw_token(residual_distribution(p, q), u_residual)};
}

}  // namespace dsv4
