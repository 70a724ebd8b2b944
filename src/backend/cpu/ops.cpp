#include "backend/cpu/ops.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/dtype.h"
#include "core/float_math.h"

namespace dsv4::cpu {

// AVX2 clone where the CPU has it; same per-lane arithmetic (no FMA contraction), so identical results.
__attribute__((target_clones("avx2", "default")))
void matmul(const float* x, int64_t T, int64_t in, const float* W, int64_t out, float* y) {
#pragma omp parallel for collapse(2) schedule(static) if (T * out * in > (1 << 21))  // decode-sized products run faster on one core
  for (int64_t t = 0; t < T; ++t)
    for (int64_t o = 0; o < out; ++o) {
      const float* a = x + t * in;
      const float* w = W + o * in;
      // Eight partial sums: vectorizable without reassociation flags, and closer to a GEMM's order.
      float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
      int64_t k = 0;
      for (; k + 8 <= in; k += 8)
        for (int j = 0; j < 8; ++j) acc[j] += a[k + j] * w[k + j];
      float s = ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
      for (; k < in; ++k) s += a[k] * w[k];
      y[t * out + o] = s;
    }
}

void rms_norm(const float* x, int64_t T, int64_t dim, const float* w, float eps, float* y) {
  for (int64_t t = 0; t < T; ++t) {
    const float* a = x + t * dim;
    double ss = 0;
    for (int64_t i = 0; i < dim; ++i) ss += double(a[i]) * a[i];
    const float r = 1.0f / std::sqrt(float(ss / double(dim)) + eps);
    float* b = y + t * dim;
    for (int64_t i = 0; i < dim; ++i) b[i] = w ? (a[i] * r) * w[i] : a[i] * r;
  }
}

void rope(float* x, const std::vector<float>& inv_freq, int64_t pos, bool inverse) {
  for (size_t i = 0; i < inv_freq.size(); ++i) {
    const float ang = float(pos) * inv_freq[i];
    const float c = cos_f32(ang), s = inverse ? -sin_f32(ang) : sin_f32(ang);
    const float a = x[2 * i], b = x[2 * i + 1];
    x[2 * i] = a * c - b * s;
    x[2 * i + 1] = a * s + b * c;
  }
}

// Transcendentals through core/float_math.h (double, rounded once), as the CUDA kernels compute them.
float softplus(float z) { return z > 20.0f ? z : log1p_f32(exp_f32(z)); }
float silu(float z) { return z / (1.0f + exp_f32(-z)); }
float sigmoid(float z) { return 1.0f / (1.0f + exp_f32(-z)); }

namespace {

// rsqrt(mean(x^2) + eps) over all n*D stream values, then mixes[r] = rho * fn[r] . x
void hc_mixes(const float* X, int64_t n, int64_t D, const float* fn, int64_t rows, float eps, float* mixes) {
  const int64_t w = n * D;
  double ss = 0;
  for (int64_t i = 0; i < w; ++i) ss += double(X[i]) * X[i];
  const float rho = 1.0f / std::sqrt(float(ss / double(w)) + eps);
  for (int64_t r = 0; r < rows; ++r) {
    double acc = 0;
    const float* f = fn + r * w;
    for (int64_t i = 0; i < w; ++i) acc += double(f[i]) * X[i];
    mixes[r] = float(acc) * rho;
  }
}

}  // namespace

void mhc_coeffs(const float* X, int64_t n, int64_t D, const float* fn, const float* base, const float* scale,
                float norm_eps, float hc_eps, int sinkhorn_iters, float* pre, float* post, float* comb) {
  const int64_t rows = (2 + n) * n;
  std::vector<float> mix(static_cast<size_t>(rows));
  hc_mixes(X, n, D, fn, rows, norm_eps, mix.data());
  for (int64_t j = 0; j < n; ++j) {
    pre[j] = sigmoid(scale[0] * mix[size_t(j)] + base[j]) + hc_eps;
    post[j] = 2.0f * sigmoid(scale[1] * mix[size_t(n + j)] + base[n + j]);
  }
  // Sinkhorn: row softmax + eps, column normalize, then (iters-1) x (row, column) normalizations.
  float* C = comb;
  for (int64_t j = 0; j < n; ++j) {
    float mx = -std::numeric_limits<float>::infinity();
    for (int64_t k = 0; k < n; ++k) {
      C[j * n + k] = scale[2] * mix[size_t(2 * n + j * n + k)] + base[2 * n + j * n + k];
      mx = std::max(mx, C[j * n + k]);
    }
    float sum = 0;
    for (int64_t k = 0; k < n; ++k) sum += (C[j * n + k] = exp_f32(C[j * n + k] - mx));
    for (int64_t k = 0; k < n; ++k) C[j * n + k] = C[j * n + k] / sum + hc_eps;
  }
  auto col_norm = [&] {
    for (int64_t k = 0; k < n; ++k) {
      float s = 0;
      for (int64_t j = 0; j < n; ++j) s += C[j * n + k];
      for (int64_t j = 0; j < n; ++j) C[j * n + k] /= (s + hc_eps);
    }
  };
  auto row_norm = [&] {
    for (int64_t j = 0; j < n; ++j) {
      float s = 0;
      for (int64_t k = 0; k < n; ++k) s += C[j * n + k];
      for (int64_t k = 0; k < n; ++k) C[j * n + k] /= (s + hc_eps);
    }
  };
  col_norm();
  for (int it = 1; it < sinkhorn_iters; ++it) {
    row_norm();
    col_norm();
  }
}

void mhc_collapse(const float* X, int64_t n, int64_t D, const float* pre, float* u) {
  for (int64_t c = 0; c < D; ++c) {
    float s = 0;
    for (int64_t j = 0; j < n; ++j) s += pre[j] * X[j * D + c];
    u[c] = s;
  }
}

void mhc_post(const float* X, int64_t n, int64_t D, const float* y, const float* post, const float* comb,
              float* Xout) {
  for (int64_t k = 0; k < n; ++k)
    for (int64_t c = 0; c < D; ++c) {
      float s = post[k] * y[c];
      for (int64_t j = 0; j < n; ++j) s += comb[j * n + k] * X[j * D + c];
      Xout[k * D + c] = s;
    }
}

void mhc_head_coeffs(const float* X, int64_t n, int64_t D, const float* fn, const float* base, const float* scale,
                     float norm_eps, float hc_eps, float* pre) {
  std::vector<float> mix(static_cast<size_t>(n));
  hc_mixes(X, n, D, fn, n, norm_eps, mix.data());
  for (int64_t j = 0; j < n; ++j) pre[j] = sigmoid(scale[0] * mix[size_t(j)] + base[j]) + hc_eps;
}

void attend_with_sink(const float* q, const float* const* keys, int64_t nkeys, int64_t d, float scale, float sink,
                      bool round_p, float* out) {
  std::vector<float> z(static_cast<size_t>(nkeys));
  float mx = -std::numeric_limits<float>::infinity();
  for (int64_t s = 0; s < nkeys; ++s) {
    float acc = 0;
    for (int64_t i = 0; i < d; ++i) acc += q[i] * keys[s][i];
    z[size_t(s)] = acc * scale;
    mx = std::max(mx, z[size_t(s)]);
  }
  std::fill(out, out + d, 0.0f);
  if (nkeys == 0) return;
  float den = exp_f32(sink - mx);
  for (int64_t s = 0; s < nkeys; ++s) den += (z[size_t(s)] = exp_f32(z[size_t(s)] - mx));
  for (int64_t s = 0; s < nkeys; ++s) {
    const float p = round_p ? round_bf16(z[size_t(s)]) : z[size_t(s)];
    for (int64_t i = 0; i < d; ++i) out[i] += p * keys[s][i];
  }
  for (int64_t i = 0; i < d; ++i) out[i] /= den;
}

}  // namespace dsv4::cpu
