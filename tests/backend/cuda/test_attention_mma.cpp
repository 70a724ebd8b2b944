// The fast sparse attention kernels against cpu::attend_with_sink(round_p = true) within Tol::Attention:
// the tensor-core kernel (prefill, > kExactLinearMaxTokens tokens), the split-K kernel (the fast tier's
// calls of up to kSplitAttentionMaxTokens tokens, row-independent), and sparse_attention's dispatch; and
// every kernel reading the page pool's compact records in place of bf16 rows.
#include <gtest/gtest.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <vector>

#include "backend/cpu/ops.h"
#include "backend/cuda/check.h"
#include "backend/cuda/kv_record.h"
#include "backend/cuda/ops.h"
#include "harness.h"

namespace dsv4::cuda::test {
namespace {

struct Case {
  int64_t tokens = 520;
  int heads = 64, dim = 512, max_keys = 640;
  int64_t entries = 5000;
  float q_sigma = 1.0f;
  int missing = 0;             // about this many -1 slots per query
  int valid_prefix = -1;       // >= 0: only the first valid_prefix slots hold keys (HCA: trailing -1)
  int64_t empty_token = -1;    // a token with no key at all
  int check_every = 37;        // CPU reference on every check_every-th token (plus the first, last, empty)
  uint64_t seed = 1;
};

struct Inputs {
  std::vector<float> q, kv, sinks;
  std::vector<int32_t> idx;
};

Inputs make_inputs(const Case& c) {
  Rng rng(c.seed);
  Inputs in;
  in.q = rng.bf16_normal(size_t(c.tokens * c.heads * c.dim), c.q_sigma);
  in.kv = rng.bf16_normal(size_t(c.entries * c.dim));
  in.sinks = rng.f32_normal(size_t(c.heads), 1.0f);
  in.idx.resize(size_t(c.tokens * c.max_keys));
  for (int64_t t = 0; t < c.tokens; ++t)
    for (int s = 0; s < c.max_keys; ++s) {
      int32_t e = rng.uniform_int(0, int(c.entries - 1));
      if (c.missing > 0 && s % std::max(1, c.max_keys / c.missing) == 1) e = -1;
      if (c.valid_prefix >= 0 && s >= c.valid_prefix) e = -1;
      if (t == c.empty_token) e = -1;
      in.idx[size_t(t * c.max_keys + s)] = e;
    }
  return in;
}

// The inputs on the device and the parameters that read them.
struct DeviceInputs {
  DeviceBuffer<uint16_t> q, kv;
  DeviceBuffer<int32_t> idx;
  DeviceBuffer<float> sinks;
  explicit DeviceInputs(const Inputs& in) : q(upload_bf16(in.q)), kv(upload_bf16(in.kv)), idx(in.idx), sinks(in.sinks) {}
  SparseAttentionParams params(const Case& c, uint16_t* out) {
    SparseAttentionParams p;
    p.q = reinterpret_cast<const bf16*>(q.get());
    p.kv = reinterpret_cast<const bf16*>(kv.get());
    p.indices = idx.get();
    p.sinks = sinks.get();
    p.out = reinterpret_cast<bf16*>(out);
    p.tokens = c.tokens;
    p.entries = c.entries;
    p.heads = c.heads;
    p.dim = c.dim;
    p.max_keys = c.max_keys;
    p.scale = 1.0f / std::sqrt(float(c.dim));
    return p;
  }
};

// Runs `fn` (sparse_attention or sparse_attention_mma) and returns the output as floats.
template <typename Fn>
std::vector<float> run(const Case& c, const Inputs& in, Fn fn, KernelTier tier = KernelTier::Exact) {
  DeviceContext ctx;
  ctx.set_kernels(tier);
  DeviceInputs d(in);
  Guarded<uint16_t> out(size_t(c.tokens * c.heads * c.dim));
  fn(ctx, d.params(c, out.get()));
  ctx.synchronize();
  return from_bf16(out.download("sparse_attention_mma"));
}

std::vector<int64_t> checked_tokens(const Case& c) {
  std::vector<int64_t> ts;
  for (int64_t t = 0; t < c.tokens; ++t)
    if (t % c.check_every == 0 || t == c.tokens - 1 || t == c.empty_token) ts.push_back(t);
  return ts;
}

// The CPU twin on the checked tokens (ref) and got's rows of those tokens (sel).
struct TwinRows {
  std::vector<float> ref, sel;
};
TwinRows twin_rows(const Case& c, const Inputs& in, const std::vector<float>& got) {
  const size_t row = size_t(c.heads) * size_t(c.dim);
  const float scale = 1.0f / std::sqrt(float(c.dim));
  TwinRows out;
  for (int64_t t : checked_tokens(c)) {
    std::vector<const float*> keys;
    for (int s = 0; s < c.max_keys; ++s)
      if (int32_t e = in.idx[size_t(t * c.max_keys + s)]; e >= 0) keys.push_back(&in.kv[size_t(e) * size_t(c.dim)]);
    std::vector<float> r(row);
    for (int h = 0; h < c.heads; ++h)
      cpu::attend_with_sink(&in.q[size_t(t) * row + size_t(h) * c.dim], keys.data(), int64_t(keys.size()), c.dim,
                            scale, in.sinks[size_t(h)], true, &r[size_t(h) * c.dim]);
    out.ref.insert(out.ref.end(), r.begin(), r.end());
    out.sel.insert(out.sel.end(), got.begin() + int64_t(t * row), got.begin() + int64_t((t + 1) * row));
  }
  return out;
}

// Compares got's checked rows with the twin; the empty token's output must be zero.
void compare_twin(const std::string& what, const Case& c, const Inputs& in, const std::vector<float>& got,
                  bool elementwise = true) {
  const size_t row = size_t(c.heads) * size_t(c.dim);
  if (c.empty_token >= 0 && c.empty_token < c.tokens) {
    for (size_t i = 0; i < row; ++i) {
      ASSERT_EQ(got[size_t(c.empty_token) * row + i], 0.0f) << what << ": empty token not zero";
    }
  }
  const TwinRows tr = twin_rows(c, in, got);
  const std::vector<float>& ref = tr.ref;
  const std::vector<float>& sel = tr.sel;
  if (elementwise) {
    const CompareResult r = compare(what, sel, round_bf16(ref), Tol::Attention);
    EXPECT_TRUE(r.ok) << r.line;
    return;
  }
  // Peaked logits: outputs that are sums of O(1) terms cancelling to ~0.02 differ by a few 1e-3 (bf16(p)
  // rounded against the running max instead of the exact max: 2^-9 of a term of size ~1), beyond
  // Tol::Attention's element-wise atol; the whole-output bounds (rel-L2, cosine) hold, and only a
  // handful of elements may fall outside the element-wise bound.
  const Tolerance& tol = tolerance(Tol::Attention);
  const std::vector<float> rr = round_bf16(ref);
  double d2 = 0, r2 = 0, g2 = 0, gr = 0, max_abs = 0;
  size_t bad = 0;
  for (size_t i = 0; i < rr.size(); ++i) {
    const double g = sel[i], r = rr[i], d = std::fabs(g - r);
    d2 += d * d, r2 += r * r, g2 += g * g, gr += g * r;
    max_abs = std::max(max_abs, d);
    bad += !(d <= tol.atol || d <= tol.rtol * std::fabs(r));
  }
  const double rel_l2 = std::sqrt(d2 / r2), cos_dist = 1.0 - gr / std::sqrt(g2 * r2);
  std::printf("[%s] n=%zu rel_l2=%.3g cos_dist=%.3g max|d|=%.3g outside the element-wise bound: %zu\n", what.c_str(),
              rr.size(), rel_l2, cos_dist, max_abs, bad);
  EXPECT_LE(cos_dist, tol.max_cos_dist) << what;
  EXPECT_LE(rel_l2, 4e-3) << what;
  EXPECT_LE(double(bad), 1e-4 * double(rr.size())) << what;
}

void check_mma(const std::string& what, const Case& c, bool elementwise = true) {
  const Inputs in = make_inputs(c);
  DeviceContext probe;
  SparseAttentionParams sp;
  sp.heads = c.heads;
  sp.dim = c.dim;
  sp.max_keys = c.max_keys;
  ASSERT_TRUE(sparse_attention_mma_supported(probe, sp)) << what;
  const std::vector<float> got = run(c, in, [](const DeviceContext& ctx, const SparseAttentionParams& p) {
    sparse_attention_mma(ctx, p);
  });
  compare_twin("sparse_attention_mma " + what, c, in, got, elementwise);
}

TEST(CudaAttentionMma, SlidingWindow128) {
  DSV4_REQUIRE_HOPPER();
  Case c;
  c.max_keys = 128;
  c.entries = 2000;
  c.missing = 9;
  c.empty_token = 5;
  c.seed = 71;
  check_mma("sliding keys=128", c);
}
TEST(CudaAttentionMma, CsaWindowPlusSelected) {
  DSV4_REQUIRE_HOPPER();
  Case c;  // 128 window + 512 selected, some holes, one query with no key
  c.max_keys = 640;
  c.missing = 40;
  c.empty_token = 300;
  c.seed = 72;
  check_mma("csa keys=640", c);
}
TEST(CudaAttentionMma, HcaShortAndLong) {
  DSV4_REQUIRE_HOPPER();
  Case a;  // window + 64 compressed entries
  a.max_keys = 192;
  a.entries = 3000;
  a.missing = 5;
  a.seed = 73;
  check_mma("hca keys=192", a);
  Case b;  // window + 8192 compressed slots, the trailing ones empty (early in a long prompt)
  b.tokens = 516;
  b.max_keys = 8320;
  b.entries = 20000;
  b.valid_prefix = 3000;
  b.check_every = 103;
  b.seed = 74;
  check_mma("hca keys=8320 (3000 valid)", b);
  b.valid_prefix = -1;
  b.check_every = 257;
  b.seed = 75;
  check_mma("hca keys=8320 (all valid)", b);
}
TEST(CudaAttentionMma, PeakedLogitsAndHeadBlocks) {
  DSV4_REQUIRE_HOPPER();
  Case c;  // large q: a few keys dominate; the running max moves across chunks
  c.max_keys = 640;
  c.q_sigma = 3.0f;
  c.seed = 76;
  check_mma("peaked q_sigma=3", c, false);
  Case d;  // 128 heads: two head blocks per token; a short list with a partial chunk
  d.tokens = 40;
  d.heads = 128;
  d.max_keys = 77;
  d.entries = 500;
  d.missing = 7;
  d.empty_token = 3;
  d.check_every = 5;
  d.seed = 77;
  check_mma("heads=128 keys=77", d);
}

// ---- The split-K kernel (attention_split.cu), reached through sparse_attention under the fast tier.

template <typename Fn>
std::vector<float> run_fast(const Case& c, const Inputs& in, Fn fn) {
  DeviceContext ctx;
  ctx.set_kernels(KernelTier::Fast);
  DeviceInputs d(in);
  Guarded<uint16_t> out(size_t(c.tokens * c.heads * c.dim));
  fn(ctx, d.params(c, out.get()));
  ctx.synchronize();
  return from_bf16(out.download("sparse_attention_split"));
}

void check_split(const std::string& what, Case c, bool elementwise = true) {
  c.check_every = 1;
  const Inputs in = make_inputs(c);
  DeviceContext probe;
  SparseAttentionParams sp;
  sp.tokens = c.tokens;
  sp.heads = c.heads;
  sp.dim = c.dim;
  sp.max_keys = c.max_keys;
  ASSERT_TRUE(sparse_attention_split_supported(probe, sp)) << what;
  const auto dispatched =
      run_fast(c, in, [](const DeviceContext& ctx, const SparseAttentionParams& p) { sparse_attention(ctx, p); });
  const auto direct =
      run_fast(c, in, [](const DeviceContext& ctx, const SparseAttentionParams& p) { sparse_attention_split(ctx, p); });
  const CompareResult same = compare("fast-tier sparse_attention == sparse_attention_split " + what, dispatched, direct,
                                     Tol::Exact);
  EXPECT_TRUE(same.ok) << same.line;
  compare_twin("sparse_attention_split " + what, c, in, dispatched, elementwise);

  // The combine in the partial launch (tickets): the bits of the combine launch, twice in a row (the
  // tickets are zero again after each launch).
  const std::vector<int32_t> zeros(size_t(c.tokens * c.heads), 0);
  DeviceBuffer<int32_t> tickets(zeros);
  for (int round = 0; round < 2; ++round) {
    const auto fused = run_fast(c, in, [&](const DeviceContext& ctx, const SparseAttentionParams& p0) {
      SparseAttentionParams p = p0;
      p.tickets = tickets.get();
      sparse_attention(ctx, p);
    });
    const CompareResult f = compare("split combine in the partial launch, round " + std::to_string(round) + " " + what,
                                    fused, dispatched, Tol::Exact);
    EXPECT_TRUE(f.ok) << f.line;
    EXPECT_EQ(tickets.download(), zeros) << what;
  }

  // Row independence: the last token alone gives its row of the whole call, bit for bit (a decode step
  // and a verify call agree).
  Case one = c;
  one.tokens = 1;
  one.empty_token = -1;
  const size_t row = size_t(c.heads) * size_t(c.dim);
  const int64_t t = c.tokens - 1;
  Inputs in1 = in;
  in1.q.assign(in.q.begin() + int64_t(size_t(t) * row), in.q.begin() + int64_t(size_t(t + 1) * row));
  in1.idx.assign(in.idx.begin() + t * c.max_keys, in.idx.begin() + (t + 1) * c.max_keys);
  const auto alone =
      run_fast(one, in1, [](const DeviceContext& ctx, const SparseAttentionParams& p) { sparse_attention(ctx, p); });
  const std::vector<float> last(dispatched.begin() + int64_t(size_t(t) * row), dispatched.end());
  const CompareResult r = compare("split row of token " + std::to_string(t) + " alone == in the call " + what, alone,
                                  last, Tol::Exact);
  EXPECT_TRUE(r.ok) << r.line;
}

TEST(CudaAttentionSplit, SlidingWindowWithAnEmptyToken) {
  DSV4_REQUIRE_HOPPER();
  Case c;
  c.tokens = 3;
  c.max_keys = 128;
  c.entries = 2000;
  c.missing = 9;
  c.empty_token = 1;
  c.seed = 81;
  check_split("sliding keys=128", c);
}
TEST(CudaAttentionSplit, CsaWindowPlusSelected) {
  DSV4_REQUIRE_HOPPER();
  Case c;
  c.tokens = 16;
  c.max_keys = 640;
  c.missing = 40;
  c.empty_token = 7;
  c.seed = 82;
  check_split("csa keys=640 tokens=16", c);
}
TEST(CudaAttentionSplit, HcaLongListsOfAMillionTokenContext) {
  DSV4_REQUIRE_HOPPER();
  Case a;  // 128 window + 8192 compressed slots (1M tokens at ratio 128), the trailing ones empty
  a.tokens = 2;
  a.max_keys = 8320;
  a.entries = 20000;
  a.valid_prefix = 3000;
  a.seed = 83;
  check_split("hca keys=8320 (3000 valid)", a);
  a.tokens = 4;
  a.valid_prefix = -1;
  a.seed = 84;
  check_split("hca keys=8320 (all valid)", a);
}
TEST(CudaAttentionSplit, PeakedLogitsOtherHeadsAndDims) {
  DSV4_REQUIRE_HOPPER();
  Case c;  // large q: a few keys dominate, the chunks' maxima differ widely
  c.tokens = 8;
  c.max_keys = 640;
  c.q_sigma = 3.0f;
  c.seed = 85;
  check_split("peaked q_sigma=3", c, false);
  Case d;  // 128 heads, a short list with a partial chunk
  d.tokens = 16;
  d.heads = 128;
  d.max_keys = 77;
  d.entries = 500;
  d.missing = 7;
  d.empty_token = 3;
  d.seed = 86;
  check_split("heads=128 keys=77", d);
  Case e;  // head dim 128 and 256 (small configs)
  e.tokens = 5;
  e.dim = 128;
  e.max_keys = 300;
  e.entries = 900;
  e.missing = 11;
  e.seed = 87;
  check_split("dim=128 keys=300", e);
  e.dim = 256;
  e.seed = 88;
  check_split("dim=256 keys=300", e);
}

// ---- Rows of the page pool as compact records (kv_record.h): every kernel reads a record as the bf16
// row it was packed from, bit for bit (the rows are first put on the records' grid: pack, then unpack);
// the bf16 copies of those rows are poisoned (NaN) before the records run, so a kernel that read them
// instead would fail.
enum class Kernel { Exact, Split, Mma };

void check_records(const std::string& what, const Case& c, int64_t base, Kernel kernel) {
  const Inputs in = make_inputs(c);
  DeviceContext ctx;
  ctx.set_kernels(kernel == Kernel::Split ? KernelTier::Fast : KernelTier::Exact);
  DeviceInputs d(in);
  const KvEntryLayout layout = kv_entry_layout(c.dim, 64);
  const int64_t n = c.entries - base;
  bf16* pool = reinterpret_cast<bf16*>(d.kv.get()) + base * c.dim;
  DeviceBuffer<uint8_t> records(size_t(n * layout.bytes()));
  pack_kv_entries(ctx, {.x = pool, .records = records.get(), .rows = n, .x_stride = c.dim, .layout = layout});
  unpack_kv_entries(ctx, {.records = records.get(), .x = pool, .rows = n, .x_stride = c.dim, .layout = layout});
  auto attend = [&](const SparseAttentionParams& p) {
    if (kernel == Kernel::Mma) {
      sparse_attention_mma(ctx, p);
    } else {
      if (kernel == Kernel::Split) {
        ASSERT_TRUE(sparse_attention_split_supported(ctx, p)) << what;
      }
      sparse_attention(ctx, p);
    }
  };
  Guarded<uint16_t> want(size_t(c.tokens * c.heads * c.dim)), got(size_t(c.tokens * c.heads * c.dim));
  attend(d.params(c, want.get()));
  ctx.synchronize();
  DSV4_CUDA_CHECK(cudaMemset(pool, 0xff, size_t(n * c.dim) * sizeof(uint16_t)));
  SparseAttentionParams p = d.params(c, got.get());
  p.records = records.get();
  p.record_base = base;
  p.rec = record_geom(layout);
  attend(p);
  ctx.synchronize();
  const std::vector<float> w = from_bf16(want.download("bf16 rows")), g = from_bf16(got.download("records"));
  size_t nan = 0;
  for (float v : w) nan += std::isnan(v);
  ASSERT_EQ(nan, 0u) << what;
  const CompareResult r = compare("records == bf16 rows, " + what, g, w, Tol::Exact);
  EXPECT_TRUE(r.ok) << r.line;
}

TEST(CudaAttentionRecords, EveryKernelReadsPoolRecordsAsTheirRows) {
  DSV4_REQUIRE_HOPPER();
  Case c;  // window rows below the base, pool rows above, a few holes and an empty query
  c.tokens = 12;
  c.max_keys = 640;
  c.entries = 3000;
  c.missing = 20;
  c.empty_token = 4;
  c.seed = 91;
  check_records("exact kernel dim=512", c, 1000, Kernel::Exact);
  check_records("split kernel dim=512", c, 1000, Kernel::Split);
  Case s = c;  // the small configs' head dims (nope 64 and 192)
  s.dim = 128;
  s.seed = 92;
  check_records("exact kernel dim=128", s, 700, Kernel::Exact);
  check_records("split kernel dim=128", s, 700, Kernel::Split);
  s.dim = 256;
  s.seed = 93;
  check_records("split kernel dim=256", s, 700, Kernel::Split);
  Case m = c;  // a prefill chunk on the tensor-core kernel
  m.tokens = 520;
  m.seed = 94;
  check_records("mma kernel dim=512", m, 1000, Kernel::Mma);
}

// ---- The inverse RoPE in the attention's launch (SparseAttentionParams::rope_*): every kernel gives the
// bits of sparse_attention then rope(inverse) (the tensor-core kernel: that second launch itself).
void check_fused_rope(const std::string& what, const Case& c, Kernel kernel) {
  const Inputs in = make_inputs(c);
  DeviceContext ctx;
  ctx.set_kernels(kernel == Kernel::Split ? KernelTier::Fast : KernelTier::Exact);
  DeviceInputs d(in);
  constexpr int kRopeDim = 64;
  Rng rng(c.seed + 1000);
  std::vector<int32_t> pos(size_t(c.tokens));
  for (int32_t& v : pos) v = rng.uniform_int(0, 1 << 20);
  std::vector<float> inv(kRopeDim / 2);
  for (int i = 0; i < kRopeDim / 2; ++i) inv[size_t(i)] = float(1.0 / std::pow(10000.0, 2.0 * i / kRopeDim));
  DeviceBuffer<int32_t> dpos(pos);
  DeviceBuffer<float> dinv(inv);
  Guarded<uint16_t> fused(size_t(c.tokens * c.heads * c.dim)), twice(size_t(c.tokens * c.heads * c.dim));
  SparseAttentionParams p = d.params(c, fused.get());
  if (kernel == Kernel::Split) {
    ASSERT_TRUE(sparse_attention_split_supported(ctx, p)) << what;
  }
  p.rope_positions = dpos.get();
  p.rope_inv_freq = dinv.get();
  p.rope_dim = kRopeDim;
  sparse_attention(ctx, p);
  sparse_attention(ctx, d.params(c, twice.get()));
  rope(ctx, {.x = reinterpret_cast<bf16*>(twice.get()), .positions = dpos.get(), .inv_freq = dinv.get(), .rows = c.tokens,
             .heads = c.heads, .head_dim = c.dim, .rope_dim = kRopeDim, .row_stride = int64_t(c.heads) * c.dim,
             .head_stride = c.dim, .inverse = true});
  ctx.synchronize();
  const std::vector<float> a = from_bf16(fused.download("fused")), b = from_bf16(twice.download("then rope"));
  const CompareResult r = compare("attention with the inverse RoPE == attention then rope, " + what, a, b, Tol::Exact);
  EXPECT_TRUE(r.ok) << r.line;
  size_t rotated = 0;  // the rope dims did move (the fused form is not a no-op)
  const std::vector<float> plain = run(c, in, [](const DeviceContext& x, const SparseAttentionParams& q) {
    sparse_attention(x, q);
  });
  for (size_t i = 0; i < a.size(); ++i) rotated += a[i] != plain[i];
  EXPECT_GT(rotated, a.size() / 20) << what;
}

TEST(CudaAttentionRope, FusedInverseRopeIsAttentionThenRope) {
  DSV4_REQUIRE_HOPPER();
  Case c;
  c.tokens = 6;
  c.max_keys = 300;
  c.entries = 2000;
  c.missing = 10;
  c.empty_token = 2;
  c.seed = 95;
  check_fused_rope("exact kernel dim=512", c, Kernel::Exact);
  check_fused_rope("split kernel dim=512", c, Kernel::Split);
  Case s = c;
  s.dim = 128;
  s.heads = 8;
  s.seed = 96;
  check_fused_rope("exact kernel dim=128", s, Kernel::Exact);
  check_fused_rope("split kernel dim=128", s, Kernel::Split);
  Case m = c;  // a prefill chunk: the tensor-core kernel, then the rope launch
  m.tokens = 520;
  m.max_keys = 160;
  m.seed = 97;
  check_fused_rope("mma kernel dim=512", m, Kernel::Mma);
}

// Up to kExactLinearMaxTokens tokens sparse_attention of the exact tier (the context's default) is the
// exact kernel (bit-identical to the twin); above, it is the tensor-core kernel (bit-identical to
// sparse_attention_mma).
TEST(CudaAttentionMma, Dispatch) {
  DSV4_REQUIRE_HOPPER();
  Case c;
  c.tokens = 512;
  c.max_keys = 160;
  c.entries = 1000;
  c.missing = 4;
  c.check_every = 61;
  c.seed = 78;
  Inputs in = make_inputs(c);
  const auto exact = run(c, in, [](const DeviceContext& ctx, const SparseAttentionParams& p) { sparse_attention(ctx, p); });
  {
    const TwinRows tr = twin_rows(c, in, exact);
    const std::vector<float>& ref = tr.ref;
    const std::vector<float>& sel = tr.sel;
    const CompareResult r = compare("sparse_attention 512 tokens (exact kernel)", sel, round_bf16(ref), Tol::Exact);
    EXPECT_TRUE(r.ok) << r.line;
  }
  c.tokens = 513;
  c.seed = 79;
  in = make_inputs(c);
  const auto dispatched =
      run(c, in, [](const DeviceContext& ctx, const SparseAttentionParams& p) { sparse_attention(ctx, p); });
  const auto mma =
      run(c, in, [](const DeviceContext& ctx, const SparseAttentionParams& p) { sparse_attention_mma(ctx, p); });
  const CompareResult r = compare("sparse_attention 513 tokens == sparse_attention_mma", dispatched, mma, Tol::Exact);
  EXPECT_TRUE(r.ok) << r.line;
}

// The fast tier: calls of kSplitAttentionMaxTokens + 1 .. kExactLinearMaxTokens tokens (decode batches)
// take the tensor-core kernel (bit-identical to sparse_attention_mma, itself held to the twin above), and
// the split kernel's calls do not.
TEST(CudaAttentionMma, FastTierDispatch) {
  DSV4_REQUIRE_HOPPER();
  auto attend = [](const DeviceContext& ctx, const SparseAttentionParams& p) { sparse_attention(ctx, p); };
  auto mma = [](const DeviceContext& ctx, const SparseAttentionParams& p) { sparse_attention_mma(ctx, p); };
  for (const int64_t tokens : {kSplitAttentionMaxTokens, kSplitAttentionMaxTokens + 1, int64_t(128)}) {
    Case c;
    c.tokens = tokens;
    c.max_keys = 160;
    c.entries = 1000;
    c.missing = 4;
    c.check_every = 7;
    c.seed = 80 + uint64_t(tokens);
    const Inputs in = make_inputs(c);
    const auto fast = run(c, in, attend, KernelTier::Fast);
    const auto want = run(c, in, mma);
    const std::string tag = "fast-tier sparse_attention, " + std::to_string(tokens) + " tokens";
    if (tokens > kSplitAttentionMaxTokens) {
      const CompareResult r = compare(tag + " == sparse_attention_mma", fast, want, Tol::Exact);
      EXPECT_TRUE(r.ok) << r.line;
    } else {
      EXPECT_FALSE(fast == want) << tag << ": the split kernel, not the tensor-core one";
    }
    compare_twin(tag, c, in, fast);
  }
}

// Timing (printed, for docs/perf-log.md): T = 2048 tokens x 64 heads x 640 keys, both kernels.
TEST(CudaAttentionMma, Timing) {
  DSV4_REQUIRE_HOPPER();
  Case c;
  c.tokens = 2048;
  c.max_keys = 640;
  c.entries = 16384;
  c.seed = 80;
  const Inputs in = make_inputs(c);
  DeviceContext ctx;
  DeviceInputs d(in);
  DeviceBuffer<uint16_t> out(size_t(c.tokens * c.heads * c.dim));
  SparseAttentionParams p = d.params(c, out.get());
  auto time = [&](const char* name, auto fn) {
    const double flop = 4.0 * double(p.tokens) * c.heads * c.max_keys * c.dim;
    fn();
    ctx.synchronize();
    constexpr int kIters = 10;
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < kIters; ++i) fn();
    ctx.synchronize();
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / kIters;
    std::printf("[timing] %s T=%lld heads=%d keys=%d: %.3f ms, %.1f TFLOP/s (%.1f%% of 777 bf16 peak)\n", name,
                static_cast<long long>(p.tokens), c.heads, c.max_keys, s * 1e3, flop / s / 1e12,
                100.0 * flop / s / 777e12);
  };
  time("sparse_attention_mma", [&] { sparse_attention_mma(ctx, p); });
  p.tokens = 512;  // the exact kernel takes every call up to 512 tokens
  time("sparse_attention exact", [&] { sparse_attention(ctx, p); });
}

}  // namespace
}  // namespace dsv4::cuda::test
