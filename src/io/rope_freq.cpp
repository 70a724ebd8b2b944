#include "io/rope_freq.h"

#include <algorithm>
#include <cmath>

namespace dsv4 {

std::vector<float> rope_inv_freq(int64_t rope_dim, const RopeConfig& r) {
  const int64_t half = rope_dim / 2;
  std::vector<float> f(static_cast<size_t>(half));
  for (int64_t i = 0; i < half; ++i) f[size_t(i)] = float(1.0 / std::pow(r.theta, double(2 * i) / double(rope_dim)));
  if (!r.yarn) return f;
  // YaRN: dims below `lo` keep their frequency, above `hi` are divided by `factor`, linear blend between.
  const double original = double(r.original_max_position);
  auto corr = [&](double rotations) {
    return double(rope_dim) * std::log(original / (rotations * 2 * M_PI)) / (2 * std::log(r.theta));
  };
  const double lo = std::max(std::floor(corr(r.beta_fast)), 0.0);
  double hi = std::min(std::ceil(corr(r.beta_slow)), double(rope_dim - 1));
  if (lo == hi) hi += 0.001;
  for (int64_t i = 0; i < half; ++i) {
    const float ramp = std::clamp(float((double(i) - lo) / (hi - lo)), 0.0f, 1.0f);
    const float extrap = f[size_t(i)];
    const float interp = float(1.0 / (r.factor * std::pow(r.theta, double(2 * i) / double(rope_dim))));
    f[size_t(i)] = interp * ramp + extrap * (1.0f - ramp);
  }
  return f;
}

}  // namespace dsv4
