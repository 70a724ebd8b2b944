// Sampling parameters of the speculative tests, spelled positionally, and the total-variation check of
// sampled tokens against their exact distribution (test_speculative, test_engine_speculative).
#pragma once
#include <algorithm>
#include <cmath>
#include <numeric>
#include <cstdint>
#include <vector>

#include "runtime/sampler.h"

namespace dsv4::test {

inline SamplingParams sampling(float temperature, int top_k = 0, float top_p = 1, float min_p = 0, uint64_t seed = 0) {
  SamplingParams p;
  p.temperature = temperature;
  p.top_k = top_k;
  p.top_p = top_p;
  p.min_p = min_p;
  p.seed = seed;
  return p;
}

// Total variation between the empirical distribution of N draws (counts per cell) and m.
inline double total_variation(const std::vector<int64_t>& counts, const std::vector<double>& m, int64_t N) {
  double tv = 0;
  for (size_t i = 0; i < m.size(); ++i) tv += std::fabs(double(counts[i]) / double(N) - m[i]);
  return tv / 2;
}
// A bound the TV of N independent draws from m stays under with probability >= 1 - 1e-4:
// E[TV] <= 1/2 sum_i sqrt(m_i (1 - m_i) / N) (Jensen on each |m^_i - m_i|, whose variance is
// m_i (1 - m_i) / N), and one draw moves the TV by at most 1/N, so P(TV >= E[TV] + t) <= exp(-2 N t^2)
// (McDiarmid): t = sqrt(ln(1e4) / (2 N)). The runs' seeds are fixed, so the test is deterministic: it
// would fail a correct decoder for at most 1 in 10^4 choices of the seed set.
inline double tv_bound(const std::vector<double>& m, int64_t N) {
  double e = 0;
  for (double x : m) e += std::sqrt(x * (1 - x) / double(N));
  return e / 2 + std::sqrt(std::log(1e4) / (2 * double(N)));
}
// m pushed through a partition of the ids (cell[id]).
inline std::vector<double> coarse(const std::vector<double>& m, const std::vector<int>& cell, int cells) {
  std::vector<double> out(static_cast<size_t>(cells), 0.0);
  for (size_t i = 0; i < m.size(); ++i) out[size_t(cell[i])] += m[i];
  return out;
}
inline std::vector<int64_t> coarse(const std::vector<int64_t>& c, const std::vector<int>& cell, int cells) {
  std::vector<int64_t> out(static_cast<size_t>(cells), 0);
  for (size_t i = 0; i < c.size(); ++i) out[size_t(cell[i])] += c[i];
  return out;
}

// The ids in `cells` cells of about equal mass under m, by rank (cell[id]; the most likely in cell 0).
inline std::vector<int> rank_cells(const std::vector<double>& m, int cells) {
  std::vector<int32_t> order(m.size());
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return m[size_t(a)] > m[size_t(b)]; });
  std::vector<int> cell(m.size());
  double cum = 0;
  for (int32_t id : order) {
    cell[size_t(id)] = std::min(cells - 1, int(cum * cells));
    cum += m[size_t(id)];
  }
  return cell;
}

}  // namespace dsv4::test
