// Reading the golden fixtures (golden.safetensors + manifest.json) and comparing logits.
#pragma once
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "io/safetensors.h"
#include "support/test_paths.h"

namespace dsv4::test {

struct Golden {
  std::map<std::string, Tensor> t;
  nlohmann::json manifest;

  explicit Golden(const std::string& fixture) {
    auto f = SafetensorsFile::open(fixture_dir(fixture) + "/golden.safetensors");
    for (const auto& e : f->tensors()) t[e.name] = to_tensor(e.view);
    std::ifstream in(fixture_dir(fixture) + "/manifest.json");
    manifest = nlohmann::json::parse(in);
  }
  const Tensor& operator[](const std::string& name) const { return t.at(name); }
  std::vector<int32_t> ids(const std::string& name) const {
    const Tensor& x = t.at(name);
    return std::vector<int32_t>(x.data.begin(), x.data.end());
  }
};

// A fixture name as a GoogleTest parameter name ("tiny-q-wide" -> "tiny_q_wide").
inline std::string test_name(std::string s) {
  for (char& c : s) c = c == '-' ? '_' : c;
  return s;
}

// ||a - b|| / ||b|| over rows [0, rows) of b (a may hold exactly those rows).
inline double rel_l2(const float* a, const float* b, size_t n) {
  double num = 0, den = 0;
  for (size_t i = 0; i < n; ++i) {
    num += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
    den += double(b[i]) * b[i];
  }
  return std::sqrt(num / den);
}
inline double rel_l2(const Tensor& a, const Tensor& b) {
  EXPECT_EQ(a.data.size(), b.data.size());
  return rel_l2(a.ptr(), b.ptr(), std::min(a.data.size(), b.data.size()));
}

// Asserts rel_l2(got, want) < tol and prints the measured value (for the perf/accuracy log).
inline void expect_rel_l2(const Tensor& got, const Tensor& want, double tol, const std::string& what) {
  const double r = rel_l2(got, want);
  std::printf("    %-40s rel L2 %.3e (limit %.1e)\n", what.c_str(), r, tol);
  EXPECT_LT(r, tol) << what;
}

// Fraction of rows whose argmax agrees.
inline double top1_agreement(const Tensor& a, const Tensor& b) {
  const int64_t rows = b.dim(0), V = b.dim(1);
  int64_t same = 0;
  for (int64_t r = 0; r < rows; ++r) {
    const float* x = a.row(r);
    const float* y = b.row(r);
    same += std::max_element(x, x + V) - x == std::max_element(y, y + V) - y;
  }
  return double(same) / double(rows);
}

}  // namespace dsv4::test
