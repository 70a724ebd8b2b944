// CPU reference ops: plain float32, written for clarity; the CUDA ops are tested against these.
// All arrays are row-major and contiguous. Shapes are given per argument.
#pragma once
#include <cstdint>
#include <vector>

namespace dsv4::cpu {

// y[T, out] = x[T, in] . W[out, in]^T   (fp32 accumulate)
void matmul(const float* x, int64_t T, int64_t in, const float* W, int64_t out, float* y);

// y[T, dim] = x * rsqrt(mean(x^2) + eps) * w   (w may be null: unweighted). y may alias x.
void rms_norm(const float* x, int64_t T, int64_t dim, const float* w, float eps, float* y);

// Rotary embedding on one vector's rope slice x[0 : 2*inv_freq.size()], interleaved pairs
// (x[2i], x[2i+1]) rotated by angle fl32(pos * inv_freq[i]); inverse rotates by the negative angle.
// The tables: rope_inv_freq (io/rope_freq.h), shared with the CUDA backend.
void rope(float* x, const std::vector<float>& inv_freq, int64_t pos, bool inverse);

// mHC pre: for one token with streams X[n, D]: mixes = rsqrt(mean(x^2)+eps) * (fn . vec(X)) -> 
// pre[n] = sigmoid(s0*mix+b)+hc_eps, post[n] = 2 sigmoid(s1*mix+b), comb[n, n] Sinkhorn (rows j,
// cols k). fn [(2+n)n, nD], base [(2+n)n], scale [3].
void mhc_coeffs(const float* X, int64_t n, int64_t D, const float* fn, const float* base, const float* scale,
                float norm_eps, float hc_eps, int sinkhorn_iters, float* pre, float* post, float* comb);
// u[D] = sum_j pre[j] X[j]
void mhc_collapse(const float* X, int64_t n, int64_t D, const float* pre, float* u);
// X'[k] = post[k] y + sum_j comb[j, k] X[j]  (column k of comb). Xout may not alias X.
void mhc_post(const float* X, int64_t n, int64_t D, const float* y, const float* post, const float* comb,
              float* Xout);
// Head collapse: pre[n] = sigmoid(s*mix + b) + hc_eps with fn [n, nD], base [n], scale [1].
void mhc_head_coeffs(const float* X, int64_t n, int64_t D, const float* fn, const float* base, const float* scale,
                     float norm_eps, float hc_eps, float* pre);

// One query head attending over `nkeys` key=value vectors (dim d) with a sink logit:
// z = q.k * scale; p = softmax([z, sink]) without the sink column; out = sum p_s k_s.
// `round_p` rounds the probabilities to bf16 before P.V (official numerics).
void attend_with_sink(const float* q, const float* const* keys, int64_t nkeys, int64_t d, float scale, float sink,
                      bool round_p, float* out);

// torch.nn.functional.softplus (beta 1, threshold 20)
float softplus(float z);
float silu(float z);
float sigmoid(float z);

}  // namespace dsv4::cpu
