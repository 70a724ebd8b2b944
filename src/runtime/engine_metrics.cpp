#include "runtime/engine_metrics.h"

#include <algorithm>

namespace dsv4 {

Histogram::Histogram(std::vector<double> bounds) : bounds_(std::move(bounds)), counts_(bounds_.size(), 0) {
  std::sort(bounds_.begin(), bounds_.end());
}

void Histogram::observe(double v) {
  for (size_t i = 0; i < bounds_.size(); ++i)
    if (v <= bounds_[i]) ++counts_[i];
  ++count_;
  sum_ += v;
}

}  // namespace dsv4
