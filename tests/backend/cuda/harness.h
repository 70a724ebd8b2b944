// The CUDA op-test harness (STYLE.md 2-4): every GPU op is checked against its CPU twin on seeded
// random inputs, with
//   * guard regions: outputs live inside a larger device buffer poisoned with 0xFF bytes; the guards
//     must come back untouched (no out-of-bounds writes) and no output element may still hold the
//     poison (every element written). 0xFF.. is NaN in bf16, fp32, e4m3 and E8M0, which no op produces
//     from finite inputs;
//   * NaN / inf positions that must match;
//   * element-wise |got - ref| <= atol or |got - ref| <= rtol * |ref|, from one tolerance table per op
//     family (below), plus a global cosine-distance bound;
//   * a one-line report with the worst element, printed for every comparison (the numbers go to
//     docs/perf-log.md from the GPU machine's output).
// GPU tests call DSV4_REQUIRE_HOPPER() first: they skip cleanly on machines without an sm_90 device
// (CI compiles and runs them there).
#pragma once
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "backend/cuda/buffer.h"
#include "backend/cuda/context.h"
#include "core/dtype.h"

namespace dsv4::cuda::test {

#define DSV4_REQUIRE_HOPPER()                                                                        \
  do {                                                                                               \
    if (!::dsv4::cuda::have_hopper_device())                                                         \
      GTEST_SKIP() << "no sm_90 CUDA device (" << ::dsv4::cuda::test::device_summary() << ")";       \
  } while (0)

std::string device_summary();

// ---- tolerance table: one row per op family and output precision.
enum class Tol {
  Exact,      // bit-exact ops (quantization codes and scales)
  F32,        // fp32 outputs of short fp32 computations
  F32Chain,   // fp32 after long reductions and iterations (mHC mixes over 16384 values, 20 Sinkhorn steps)
  Bf16,       // bf16 outputs of fp32 math (norms, RoPE, mHC collapse/post): 1 bf16 ulp
  GemmBf16,   // bf16 x bf16 GEMM, fp32 accumulate, bf16 out
  GemmFp8,    // FP8 block-scaled GEMM vs the dequantized fp32 product
  GemvFp4,    // FP4-weight GEMV vs the dequantized fp32 product
  Attention,  // sparse attention, bf16 P.V
  MoeGrouped, // the routed experts' grouped tensor-core pass (moe_prefill.h) vs the per-selection GEMVs
};
struct Tolerance {
  const char* name;
  double atol, rtol;
  double max_cos_dist;  // 1 - cos(got, ref) over the whole output
};
const Tolerance& tolerance(Tol t);

struct CompareResult {
  bool ok = true;
  size_t n = 0, bad = 0, nan_mismatch = 0;
  size_t worst = 0;  // index of the element with the largest |got - ref| / (atol + rtol |ref|)
  double worst_got = 0, worst_ref = 0, worst_abs = 0;
  double max_abs = 0, rel_l2 = 0, cos_dist = 0;
  std::string line;  // one-line summary
};
// Compares and prints the summary line ("[what] ..."). `got` and `ref` have n elements.
CompareResult compare(const std::string& what, const float* got, const float* ref, size_t n, Tol tol);
inline CompareResult compare(const std::string& what, const std::vector<float>& got, const std::vector<float>& ref,
                             Tol tol) {
  EXPECT_EQ(got.size(), ref.size()) << what;
  return compare(what, got.data(), ref.data(), std::min(got.size(), ref.size()), tol);
}

// ---- guarded device outputs.
template <typename T>
class Guarded {
 public:
  static constexpr size_t kGuard = 1024;  // elements on each side
  explicit Guarded(size_t n) : n_(n), buf_(n + 2 * kGuard) { buf_.fill_bytes(0xff); }
  T* get() { return buf_.get() + kGuard; }
  size_t size() const { return n_; }
  // Downloads the output; records a test failure for touched guards or elements never written.
  std::vector<T> download(const std::string& what) const {
    std::vector<T> all = buf_.download();
    size_t guard_hits = 0, unwritten = 0, first_unwritten = n_;
    for (size_t i = 0; i < kGuard; ++i) guard_hits += !poison(all[i]) + !poison(all[kGuard + n_ + i]);
    for (size_t i = 0; i < n_; ++i)
      if (poison(all[kGuard + i])) {
        if (!unwritten) first_unwritten = i;
        ++unwritten;
      }
    EXPECT_EQ(guard_hits, 0u) << what << ": " << guard_hits << " guard elements overwritten (out-of-bounds writes)";
    EXPECT_EQ(unwritten, 0u) << what << ": " << unwritten << " of " << n_ << " outputs never written (first at "
                             << first_unwritten << ")";
    return std::vector<T>(all.begin() + kGuard, all.begin() + kGuard + n_);
  }

 private:
  static bool poison(const T& v) {
    const unsigned char* b = reinterpret_cast<const unsigned char*>(&v);
    for (size_t i = 0; i < sizeof(T); ++i)
      if (b[i] != 0xff) return false;
    return true;
  }
  size_t n_;
  DeviceBuffer<T> buf_;
};

// ---- seeded inputs.
class Rng {
 public:
  explicit Rng(uint64_t seed) : gen_(seed) {}
  float normal(float sigma = 1.0f) { return std::normal_distribution<float>(0.0f, sigma)(gen_); }
  float uniform(float lo, float hi) { return std::uniform_real_distribution<float>(lo, hi)(gen_); }
  int uniform_int(int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(gen_); }
  // n normal values rounded to bf16 (the GPU sees exactly the values the CPU twin sees).
  std::vector<float> bf16_normal(size_t n, float sigma = 1.0f);
  std::vector<float> f32_normal(size_t n, float sigma = 1.0f);
  std::vector<uint8_t> bytes(size_t n, int lo = 0, int hi = 255);

 private:
  std::mt19937_64 gen_;
};

// bf16 bit patterns <-> floats (values already representable pass through exactly).
std::vector<uint16_t> to_bf16(const std::vector<float>& v);
std::vector<float> from_bf16(const std::vector<uint16_t>& v);
std::vector<float> round_bf16(std::vector<float> v);

// A device copy of float values as bf16.
DeviceBuffer<uint16_t> upload_bf16(const std::vector<float>& v);

// Timing in the GPU tests (informative prints; timing goals live in the benchmarks): `call` issued
// calls_per_graph times into one CUDA graph, one warm-up replay, then `reps` replays timed with events;
// microseconds per call.
double graph_replay_us(const DeviceContext& ctx, const std::function<void()>& call, int calls_per_graph = 1,
                       int reps = 50);

}  // namespace dsv4::cuda::test
