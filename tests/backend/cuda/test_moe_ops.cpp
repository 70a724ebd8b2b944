// MoE small ops (moe_ops.h) against their CPU twins: the steps of Model::moe written out on the CPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <numeric>
#include <string>
#include <vector>

#include "backend/cpu/ops.h"
#include "backend/cuda/gemm.h"
#include "backend/cuda/moe_ops.h"
#include "backend/cuda/ops.h"
#include "core/dtype.h"
#include "core/quant.h"
#include "harness.h"

namespace dsv4::cuda::test {
namespace {

const bf16* as_bf16(const DeviceBuffer<uint16_t>& b) { return reinterpret_cast<const bf16*>(b.get()); }

struct RouterRef {
  std::vector<float> scores, weights;
  std::vector<int32_t> ids;
};

// The router of Model::moe (src/model/moe.cpp) on bf16-valued inputs.
RouterRef router_ref(const std::vector<float>& x, const std::vector<float>& gate, const std::vector<float>& bias,
                     const std::vector<int32_t>& tid2eid, const std::vector<int32_t>& tokens, int64_t T, int E, int D,
                     int k, float scaling) {
  RouterRef r;
  r.scores.resize(size_t(T * E));
  cpu::matmul(x.data(), T, D, gate.data(), E, r.scores.data());
  for (float& s : r.scores) s = std::sqrt(cpu::softplus(s));
  for (int64_t t = 0; t < T; ++t) {
    const float* s = &r.scores[size_t(t * E)];
    std::vector<int32_t> pick;
    if (!tid2eid.empty()) {
      for (int i = 0; i < k; ++i) pick.push_back(tid2eid[size_t(tokens[size_t(t)] * k + i)]);
    } else {
      std::vector<int32_t> order(static_cast<size_t>(E));
      std::iota(order.begin(), order.end(), 0);
      std::partial_sort(order.begin(), order.begin() + k, order.end(), [&](int32_t a, int32_t c) {
        const float va = s[a] + bias[size_t(a)], vc = s[c] + bias[size_t(c)];
        return va != vc ? va > vc : a < c;
      });
      pick.assign(order.begin(), order.begin() + k);
    }
    float sum = 0;
    for (int32_t e : pick) sum += s[e];
    for (int32_t e : pick) {
      r.ids.push_back(e);
      r.weights.push_back(s[e] / sum * scaling);
    }
  }
  return r;
}

void check_router(bool hash, uint64_t seed) {
  DSV4_REQUIRE_HOPPER();
  DeviceContext ctx;
  Rng rng(seed);
  const int64_t T = 7, V = 50;
  const int E = 64, D = 512, k = 6;
  const float scaling = 1.5f;
  std::vector<float> x = rng.bf16_normal(size_t(T * D)), gate = rng.bf16_normal(size_t(E * D), 0.05f);
  std::vector<float> bias = rng.f32_normal(size_t(E), 0.1f);
  std::vector<int32_t> tid2eid, tokens;
  if (hash) {
    for (int64_t i = 0; i < V * k; ++i) tid2eid.push_back(rng.uniform_int(0, E - 1));
    for (int64_t t = 0; t < T; ++t) tokens.push_back(rng.uniform_int(0, int(V) - 1));
  }
  const RouterRef ref = router_ref(x, gate, bias, tid2eid, tokens, T, E, D, k, scaling);

  DeviceBuffer<uint16_t> dx = upload_bf16(x), dg = upload_bf16(gate);
  DeviceBuffer<float> db(bias);
  DeviceBuffer<int32_t> dt(hash ? tid2eid : std::vector<int32_t>{0}), dtok(hash ? tokens : std::vector<int32_t>{0});
  DeviceBuffer<int32_t> bad(std::vector<int32_t>{0});
  Guarded<float> scores(size_t(T * E)), weights(size_t(T * k));
  Guarded<int32_t> ids(size_t(T * k));
  RouterParams p;
  p.x = as_bf16(dx);
  p.gate = as_bf16(dg);
  p.bias = db.get();
  p.tid2eid = hash ? dt.get() : nullptr;
  p.token_ids = dtok.get();
  p.scores = scores.get();
  p.ids = ids.get();
  p.weights = weights.get();
  p.bad = bad.get();
  p.T = T;
  p.vocab = V;
  p.E = E;
  p.D = D;
  p.k = k;
  p.scaling = scaling;
  moe_router(ctx, p);
  ctx.synchronize();
  EXPECT_TRUE(compare("router scores", scores.download("scores"), ref.scores, Tol::F32Chain).ok);
  EXPECT_EQ(ids.download("ids"), ref.ids);
  EXPECT_TRUE(compare("router weights", weights.download("weights"), ref.weights, Tol::F32Chain).ok);
  EXPECT_EQ(bad.download()[0], 0);
}

TEST(CudaMoeOps, RouterTopK) { check_router(false, 11); }
TEST(CudaMoeOps, RouterHash) { check_router(true, 12); }

// The one-launch router (tickets) with x's codes (block-major scales, P = 16 rows) gives the bits of the
// two launches and act_quant_rows, twice in a row (the tickets are zero again after each launch), top-k
// and hash routing.
void check_router_one_launch(bool hash, uint64_t seed) {
  DeviceContext ctx;
  Rng rng(seed);
  const int64_t T = 7, V = 50, P = 16;
  const int E = 64, D = 512, k = 6;
  std::vector<float> x = rng.bf16_normal(size_t(T * D)), gate = rng.bf16_normal(size_t(E * D), 0.05f);
  std::vector<float> bias = rng.f32_normal(size_t(E), 0.1f);
  std::vector<int32_t> tid2eid{0}, tokens{0};
  if (hash) {
    tid2eid.clear();
    tokens.clear();
    for (int64_t i = 0; i < V * k; ++i) tid2eid.push_back(rng.uniform_int(0, E - 1));
    for (int64_t t = 0; t < T; ++t) tokens.push_back(rng.uniform_int(0, int(V) - 1));
  }
  DeviceBuffer<uint16_t> dx = upload_bf16(x), dg = upload_bf16(gate);
  DeviceBuffer<float> db(bias);
  DeviceBuffer<int32_t> dt(tid2eid), dtok(tokens), tickets(std::vector<int32_t>(size_t(T), 0));
  struct Out {
    DeviceBuffer<float> scores, weights, xs;
    DeviceBuffer<int32_t> ids;
    DeviceBuffer<uint8_t> xq;
  };
  auto out = [&] {
    Out o{DeviceBuffer<float>(size_t(T * E)), DeviceBuffer<float>(size_t(T * k)), DeviceBuffer<float>(size_t(D / 128 * P)),
          DeviceBuffer<int32_t>(size_t(T * k)), DeviceBuffer<uint8_t>(size_t(P * D))};
    o.xs.fill_bytes(0);
    o.xq.fill_bytes(0);
    return o;
  };
  auto params = [&](Out& o) {
    RouterParams p;
    p.x = as_bf16(dx);
    p.gate = as_bf16(dg);
    p.bias = db.get();
    p.tid2eid = hash ? dt.get() : nullptr;
    p.token_ids = dtok.get();
    p.scores = o.scores.get();
    p.ids = o.ids.get();
    p.weights = o.weights.get();
    p.T = T;
    p.vocab = V;
    p.E = E;
    p.D = D;
    p.k = k;
    p.scaling = 1.5f;
    return p;
  };
  Out two = out();
  moe_router(ctx, params(two));
  act_quant_rows(ctx, as_bf16(dx), T, D, two.xq.get(), two.xs.get(), 1, P);
  for (int round = 0; round < 2; ++round) {
    Out one = out();
    RouterParams p = params(one);
    p.tickets = tickets.get();
    p.codes = one.xq.get();
    p.scales = one.xs.get();
    p.sf_row_stride = 1;
    p.sf_block_stride = P;
    moe_router(ctx, p);
    ctx.synchronize();
    const std::string what = std::string(hash ? "hash" : "top-k") + " round " + std::to_string(round) + ": ";
    EXPECT_EQ(one.scores.download(), two.scores.download()) << what << "scores";
    EXPECT_EQ(one.ids.download(), two.ids.download()) << what << "ids";
    EXPECT_EQ(one.weights.download(), two.weights.download()) << what << "weights";
    EXPECT_EQ(one.xq.download(), two.xq.download()) << what << "codes";
    EXPECT_EQ(one.xs.download(), two.xs.download()) << what << "scales";
    EXPECT_EQ(tickets.download(), std::vector<int32_t>(size_t(T), 0)) << what << "tickets";
  }
  RouterParams bad = params(two);
  bad.tickets = tickets.get();
  bad.E = 60;  // not a multiple of 8
  EXPECT_THROW(moe_router(ctx, bad), Error);
}

TEST(CudaMoeOps, RouterOneLaunchWithCodes) {
  DSV4_REQUIRE_HOPPER();
  check_router_one_launch(false, 13);
  check_router_one_launch(true, 14);
}

// Many tokens: the tiled scores kernel (8 x 16 or 32 x 16 tiles) gives the bits of the per-(token, expert)
// warps, here the same router run on pieces of at most 16 tokens; and the CPU twin's picks. Tails in
// tokens, experts and columns (D not a multiple of 256).
void check_router_tiled(int64_t T, int E, int D, uint64_t seed) {
  DeviceContext ctx;
  Rng rng(seed);
  const int k = 6;
  const float scaling = 1.5f;
  std::vector<float> x = rng.bf16_normal(size_t(T * D)), gate = rng.bf16_normal(size_t(int64_t(E) * D), 0.05f);
  std::vector<float> bias = rng.f32_normal(size_t(E), 0.1f);
  const RouterRef ref = router_ref(x, gate, bias, {}, {}, T, E, D, k, scaling);
  DeviceBuffer<uint16_t> dx = upload_bf16(x), dg = upload_bf16(gate);
  DeviceBuffer<float> db(bias);
  DeviceBuffer<int32_t> dtok(std::vector<int32_t>{0});
  Guarded<float> scores(size_t(T * E)), weights(size_t(T * k));
  Guarded<int32_t> ids(size_t(T * k));
  DeviceBuffer<float> pscores(size_t(T * E)), pweights(size_t(T * k));
  DeviceBuffer<int32_t> pids(size_t(T * k));
  auto params = [&](int64_t t0, int64_t n, float* s, int32_t* id, float* w) {
    RouterParams p;
    p.x = as_bf16(dx) + t0 * D;
    p.gate = as_bf16(dg);
    p.bias = db.get();
    p.token_ids = dtok.get();
    p.scores = s + t0 * E;
    p.ids = id + t0 * k;
    p.weights = w + t0 * k;
    p.T = n;
    p.E = E;
    p.D = D;
    p.k = k;
    p.scaling = scaling;
    return p;
  };
  moe_router(ctx, params(0, T, scores.get(), ids.get(), weights.get()));
  for (int64_t t0 = 0; t0 < T; t0 += 16)
    moe_router(ctx, params(t0, std::min<int64_t>(16, T - t0), pscores.get(), pids.get(), pweights.get()));
  ctx.synchronize();
  const std::string tag = " T=" + std::to_string(T) + " E=" + std::to_string(E) + " D=" + std::to_string(D);
  const std::vector<float> got = scores.download("scores"), pieces = pscores.download();
  ASSERT_EQ(got.size(), pieces.size());
  EXPECT_EQ(std::memcmp(got.data(), pieces.data(), got.size() * sizeof(float)), 0) << "tiled vs per-warp scores" << tag;
  EXPECT_EQ(ids.download("ids"), pids.download()) << tag;
  EXPECT_EQ(weights.download("weights"), pweights.download()) << tag;
  EXPECT_TRUE(compare("router scores" + tag, got, ref.scores, Tol::F32Chain).ok);
  EXPECT_EQ(ids.download("ids"), ref.ids) << tag;
}

TEST(CudaMoeOps, RouterManyTokens) {
  DSV4_REQUIRE_HOPPER();
  check_router_tiled(64, 64, 512, 15);     // the smallest tiled count
  check_router_tiled(203, 72, 520, 16);    // 8 x 16 tiles
  check_router_tiled(600, 40, 264, 17);    // 32 x 16 tiles (>= 512 tokens)
  check_router_tiled(530, 256, 1024, 18);  // Flash's expert count
}

// Given logits (RouterParams::logits_given, the fast tier's router above kRouterLtMinTokens tokens): (1) the
// CPU's logits uploaded: the selection turns them into the twin's scores, ids and weights; (2) the logits of
// a cuBLASLt bf16 -> fp32 plan (another fp32 sum order): scores within the fp32-chain bound, and the twin's
// picks for every token whose k-th and (k+1)-th values of s + bias are apart by more than that bound can move
// them (a near-tie may flip; the test counts them, and a random case has none or very few).
void check_router_logits_given(bool hash, int64_t T, int E, int D, uint64_t seed) {
  DeviceContext ctx;
  Rng rng(seed);
  const int64_t V = 97;
  const int k = 6;
  const float scaling = 1.5f;
  std::vector<float> x = rng.bf16_normal(size_t(T * D)), gate = rng.bf16_normal(size_t(int64_t(E) * D), 0.05f);
  std::vector<float> bias = rng.f32_normal(size_t(E), 0.1f);
  std::vector<int32_t> tid2eid{0}, tokens{0};
  if (hash) {
    tid2eid.clear();
    tokens.clear();
    for (int64_t i = 0; i < V * k; ++i) tid2eid.push_back(rng.uniform_int(0, E - 1));
    for (int64_t t = 0; t < T; ++t) tokens.push_back(rng.uniform_int(0, int(V) - 1));
  }
  const RouterRef ref = router_ref(x, gate, bias, hash ? tid2eid : std::vector<int32_t>{},
                                   hash ? tokens : std::vector<int32_t>{}, T, E, D, k, scaling);
  std::vector<float> logits(size_t(T * E));
  cpu::matmul(x.data(), T, D, gate.data(), E, logits.data());
  DeviceBuffer<uint16_t> dx = upload_bf16(x), dg = upload_bf16(gate);
  DeviceBuffer<float> db(bias);
  DeviceBuffer<int32_t> dt(tid2eid), dtok(tokens);
  const std::string tag = std::string(hash ? " hash" : " top-k") + " T=" + std::to_string(T) + " E=" + std::to_string(E);
  for (const bool gpu_logits : {false, true}) {
    Guarded<float> scores(size_t(T * E)), weights(size_t(T * k));
    Guarded<int32_t> ids(size_t(T * k));
    if (gpu_logits) {
      LtMatmul plan(ctx, GemmKind::Bf16F32Out, E, D, T);
      plan.run_bf16_f32(ctx, as_bf16(dx), as_bf16(dg), scores.get());
    } else {
      DSV4_CUDA_CHECK(cudaMemcpy(scores.get(), logits.data(), logits.size() * sizeof(float), cudaMemcpyHostToDevice));
    }
    RouterParams p;
    p.x = as_bf16(dx);
    p.gate = as_bf16(dg);
    p.bias = db.get();
    p.tid2eid = hash ? dt.get() : nullptr;
    p.token_ids = dtok.get();
    p.scores = scores.get();
    p.ids = ids.get();
    p.weights = weights.get();
    p.T = T;
    p.vocab = V;
    p.E = E;
    p.D = D;
    p.k = k;
    p.scaling = scaling;
    p.logits_given = true;
    moe_router(ctx, p);
    ctx.synchronize();
    const std::string what = tag + (gpu_logits ? " cuBLASLt logits" : " the CPU's logits");
    const std::vector<float> got_scores = scores.download("scores");
    const std::vector<int32_t> got_ids = ids.download("ids");
    const std::vector<float> got_weights = weights.download("weights");
    if (!gpu_logits) {  // the same logits: the same scores, picks and weights
      EXPECT_EQ(got_scores, ref.scores) << what;
      EXPECT_EQ(got_ids, ref.ids) << what;
      EXPECT_TRUE(compare("router weights" + what, got_weights, ref.weights, Tol::F32Chain).ok);
      continue;
    }
    EXPECT_TRUE(compare("router scores" + what, got_scores, ref.scores, Tol::F32Chain).ok);
    int64_t flipped = 0;
    for (int64_t t = 0; t < T; ++t) {
      const auto row = [&](const std::vector<int32_t>& v) {
        return std::vector<int32_t>(v.begin() + t * k, v.begin() + (t + 1) * k);
      };
      if (row(got_ids) == row(ref.ids)) continue;
      ASSERT_FALSE(hash) << what << ": hash picks differ at token " << t;
      std::vector<float> v(static_cast<size_t>(E));
      for (int e = 0; e < E; ++e) v[size_t(e)] = ref.scores[size_t(t * E + e)] + bias[size_t(e)];
      std::sort(v.begin(), v.end(), std::greater<float>());
      const float margin = v[size_t(k - 1)] - v[size_t(k)];
      EXPECT_LT(margin, 1e-4f) << what << ": token " << t << " picks differ with a margin of " << margin;
      ++flipped;
    }
    EXPECT_LE(flipped, 1) << what << ": near-tie flips";
  }
}

TEST(CudaMoeOps, RouterLogitsGiven) {
  DSV4_REQUIRE_HOPPER();
  check_router_logits_given(false, 64, 64, 512, 31);
  check_router_logits_given(true, 64, 64, 512, 32);
  check_router_logits_given(false, 300, 256, 1024, 33);  // Flash's expert count
  check_router_logits_given(false, 530, 40, 272, 34);    // E % 8 != 0, D % 256 != 0
}

TEST(CudaMoeOps, RouterTopKTiesGoToLowerIds) {
  DSV4_REQUIRE_HOPPER();
  DeviceContext ctx;
  const int E = 16, D = 8, k = 4;
  std::vector<float> x(D, 0.0f), gate(size_t(E * D), 0.0f), bias(E, 0.0f);  // every score equal
  bias[9] = 1.0f;
  DeviceBuffer<uint16_t> dx = upload_bf16(x), dg = upload_bf16(gate);
  DeviceBuffer<float> db(bias), scores(static_cast<size_t>(E)), weights(static_cast<size_t>(k));
  DeviceBuffer<int32_t> ids(static_cast<size_t>(k));
  RouterParams p;
  p.x = as_bf16(dx);
  p.gate = as_bf16(dg);
  p.bias = db.get();
  p.scores = scores.get();
  p.ids = ids.get();
  p.weights = weights.get();
  p.T = 1;
  p.E = E;
  p.D = D;
  p.k = k;
  moe_router(ctx, p);
  ctx.synchronize();
  EXPECT_EQ(ids.download(), (std::vector<int32_t>{9, 0, 1, 2}));
  for (float w : weights.download()) EXPECT_FLOAT_EQ(w, 0.25f);
}

TEST(CudaMoeOps, GatherAndPlan) {
  DSV4_REQUIRE_HOPPER();
  DeviceContext ctx;
  Rng rng(21);
  const int64_t T = 9, P = 16;
  const int k = 3, D = 256, E = 10;
  std::vector<uint8_t> xq = rng.bytes(size_t(P * D), 0, 254);  // 0xFF is the guard poison
  std::vector<float> xs = rng.f32_normal(size_t(P * D / 128));
  DeviceBuffer<uint8_t> dxq(xq);
  DeviceBuffer<float> dxs(xs);
  Guarded<uint8_t> sel(size_t(T * k * D));
  Guarded<float> sels(size_t(T * k * D / 128));
  MoeGatherParams g;
  g.xq = dxq.get();
  g.xs = dxs.get();
  g.sel_xq = sel.get();
  g.sel_xs = sels.get();
  g.T = T;
  g.P = P;
  g.k = k;
  g.D = D;
  moe_gather(ctx, g);

  std::vector<int32_t> ids;
  for (int64_t i = 0; i < T * k; ++i) ids.push_back(rng.uniform_int(0, E - 1));
  DeviceBuffer<int32_t> dids(ids);
  Guarded<int32_t> plan(size_t(moe_plan_ints(T * k, E)));
  DeviceBuffer<int32_t> scratch(size_t(moe_plan_scratch_ints(T * k, E)));
  MoePlanParams pp;
  pp.ids = dids.get();
  pp.counts = plan.get();
  pp.offsets = plan.get() + E;
  pp.rows = plan.get() + 2 * E + 1;
  pp.scratch = scratch.get();
  pp.entries = T * k;
  pp.E = E;
  moe_plan(ctx, pp);
  ctx.synchronize();

  std::vector<uint8_t> ref_q;
  std::vector<float> ref_s;
  for (int64_t i = 0; i < T * k; ++i) {
    const int64_t t = i / k;
    ref_q.insert(ref_q.end(), xq.begin() + t * D, xq.begin() + (t + 1) * D);
    for (int b = 0; b < D / 128; ++b) ref_s.push_back(xs[size_t(b * P + t)]);
  }
  EXPECT_EQ(sel.download("sel codes"), ref_q);
  EXPECT_EQ(sels.download("sel scales"), ref_s);

  std::vector<int32_t> ref(size_t(moe_plan_ints(T * k, E)), 0);  // counting sort
  int32_t off = 0;
  for (int e = 0; e < E; ++e) {
    ref[size_t(E + e)] = off;
    for (int64_t i = 0; i < T * k; ++i)
      if (ids[size_t(i)] == e) ref[size_t(2 * E + 1 + off++)] = int32_t(i);
    ref[size_t(e)] = off - ref[size_t(E + e)];
  }
  ref[size_t(2 * E)] = off;
  EXPECT_EQ(plan.download("plan"), ref);
}

// The plan at prefill sizes: up to 8192 tokens x k picks, many chunks, hash-like (uniform), top-k-like
// unbalanced (most entries on a few experts), a single expert, and the largest E.
void check_plan(int64_t T, int k, int E, int mode, uint64_t seed) {
  DeviceContext ctx;
  Rng rng(seed);
  const int64_t n = T * k;
  std::vector<int32_t> ids(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    if (mode == 0) ids[size_t(i)] = rng.uniform_int(0, E - 1);                                  // uniform
    else if (mode == 1) ids[size_t(i)] = rng.uniform_int(0, 9) < 8 ? rng.uniform_int(0, 3) : rng.uniform_int(0, E - 1);
    else ids[size_t(i)] = E - 1;                                                                 // one expert
  }
  DeviceBuffer<int32_t> dids(ids);
  Guarded<int32_t> plan(size_t(moe_plan_ints(n, E)));
  Guarded<int32_t> entry_row(static_cast<size_t>(n));
  DeviceBuffer<int32_t> scratch(size_t(moe_plan_scratch_ints(n, E)));
  MoePlanParams pp;
  pp.ids = dids.get();
  pp.counts = plan.get();
  pp.offsets = plan.get() + E;
  pp.rows = plan.get() + 2 * E + 1;
  pp.entry_row = entry_row.get();
  pp.scratch = scratch.get();
  pp.entries = n;
  pp.E = E;
  moe_plan(ctx, pp);
  moe_plan(ctx, pp);  // re-runnable on the same scratch
  ctx.synchronize();
  std::vector<int32_t> ref(size_t(moe_plan_ints(n, E)), 0), ref_inv(static_cast<size_t>(n));
  std::vector<int32_t> cnt(size_t(E), 0);
  for (int32_t e : ids) ++cnt[size_t(e)];
  int32_t off = 0;
  for (int e = 0; e < E; ++e) {
    ref[size_t(e)] = cnt[size_t(e)];
    ref[size_t(E + e)] = off;
    off += cnt[size_t(e)];
  }
  ref[size_t(2 * E)] = off;
  std::vector<int32_t> next(ref.begin() + E, ref.begin() + 2 * E);
  for (int64_t i = 0; i < n; ++i) {  // ascending entries = ascending token, then pick
    const int32_t r = next[size_t(ids[size_t(i)])]++;
    ref[size_t(2 * E + 1 + r)] = int32_t(i);
    ref_inv[size_t(i)] = r;
  }
  EXPECT_EQ(plan.download("plan"), ref) << "T " << T << " k " << k << " E " << E << " mode " << mode;
  EXPECT_EQ(entry_row.download("entry_row"), ref_inv) << "T " << T << " k " << k << " E " << E << " mode " << mode;
}

// gather_rows (expert parallelism's send rows): row i is source row rows[i] / div, bits unchanged; the
// guards around the output stay untouched.
TEST(CudaMoeOps, GatherRowsByEntry) {
  DSV4_REQUIRE_HOPPER();
  DeviceContext ctx;
  Rng rng(23);
  const int64_t T = 7, n = 19;
  const int D = 136, div = 3;  // D a multiple of 8, not of 128
  std::vector<uint16_t> src(size_t(T * D));
  for (uint16_t& v : src) v = uint16_t(rng.uniform_int(0, 0xfeff));
  std::vector<int32_t> rows;
  for (int64_t i = 0; i < n; ++i) rows.push_back(rng.uniform_int(0, int(T * div) - 1));
  DeviceBuffer<uint16_t> dsrc(src);
  DeviceBuffer<int32_t> drows(rows);
  Guarded<uint16_t> out(size_t(n * D));
  gather_rows(ctx, {.src = as_bf16(dsrc), .rows = drows.get(), .div = div, .dst = reinterpret_cast<bf16*>(out.get()),
                    .n = n, .D = D});
  ctx.synchronize();
  std::vector<uint16_t> want;
  for (int32_t r : rows) want.insert(want.end(), src.begin() + (r / div) * D, src.begin() + (r / div + 1) * D);
  EXPECT_EQ(out.download("gathered rows"), want);
}

TEST(CudaMoeOps, PlanAtPrefillSizes) {
  DSV4_REQUIRE_HOPPER();
  check_plan(8192, 6, 256, 0, 41);
  check_plan(8192, 6, 256, 1, 42);
  check_plan(8192, 8, 4096, 0, 43);
  check_plan(3000, 6, 64, 2, 44);
  check_plan(600, 6, 256, 1, 45);
  check_plan(1, 1, 1, 0, 46);
}

TEST(CudaMoeOps, SwigluClamped) {
  DSV4_REQUIRE_HOPPER();
  DeviceContext ctx;
  Rng rng(31);
  const int64_t rows = 13;
  const int I = 384;
  const float limit = 3.0f;
  std::vector<float> gu = rng.bf16_normal(size_t(rows * 2 * I), 4.0f), w = rng.f32_normal(size_t(rows));
  DeviceBuffer<uint16_t> dgu = upload_bf16(gu);
  DeviceBuffer<float> dw(w);
  Guarded<uint16_t> h(size_t(rows * I));
  SwigluParams p;
  p.g = as_bf16(dgu);
  p.u = as_bf16(dgu) + I;
  p.g_stride = p.u_stride = 2 * I;
  p.weight = dw.get();
  p.h = reinterpret_cast<bf16*>(h.get());
  p.rows = rows;
  p.I = I;
  p.limit = limit;
  swiglu(ctx, p);
  ctx.synchronize();
  std::vector<float> ref(size_t(rows * I));
  for (int64_t r = 0; r < rows; ++r)
    for (int i = 0; i < I; ++i) {
      const float g = std::min(gu[size_t(r * 2 * I + i)], limit);
      const float u = std::clamp(gu[size_t(r * 2 * I + I + i)], -limit, limit);
      ref[size_t(r * I + i)] = dsv4::round_bf16(w[size_t(r)] * (cpu::silu(g) * u));
    }
  EXPECT_TRUE(compare("swiglu", from_bf16(h.download("h")), ref, Tol::Bf16).ok);
}

// swiglu_quant: the codes and scales of swiglu followed by act_quant_rows, bit for bit (row-major scales
// as the routed experts', block-major with padded rows as the shared expert's before cuBLASLt), with and
// without the routing weight, clamped and not; and the quantization against the CPU twin of both steps.
TEST(CudaMoeOps, SwigluQuantIsSwigluThenQuant) {
  DSV4_REQUIRE_HOPPER();
  DeviceContext ctx;
  Rng rng(32);
  const int64_t rows = 11, P = 16;
  const int I = 512;
  std::vector<float> gu = rng.bf16_normal(size_t(rows * 2 * I), 4.0f), w = rng.f32_normal(size_t(rows));
  DeviceBuffer<uint16_t> dgu = upload_bf16(gu);
  DeviceBuffer<float> dw(w);
  DeviceBuffer<uint16_t> h(size_t(rows * I));
  for (const bool block_major : {false, true})
    for (const bool weighted : {true, false})
      for (const float limit : {3.0f, 0.0f}) {
        SwigluParams s;
        s.g = as_bf16(dgu);
        s.u = as_bf16(dgu) + I;
        s.g_stride = s.u_stride = 2 * I;
        s.weight = weighted ? dw.get() : nullptr;
        s.h = reinterpret_cast<bf16*>(h.get());
        s.rows = rows;
        s.I = I;
        s.limit = limit;
        const int64_t row_stride = block_major ? 1 : I / 128, block_stride = block_major ? P : 1;
        const size_t nscales = size_t(block_major ? P * (I / 128) : rows * (I / 128));
        Guarded<uint8_t> codes_a(size_t(rows * I)), codes_b(size_t(rows * I));
        Guarded<float> scales_a(nscales), scales_b(nscales);
        DSV4_CUDA_CHECK(cudaMemsetAsync(scales_a.get(), 0, nscales * 4, ctx.stream()));
        DSV4_CUDA_CHECK(cudaMemsetAsync(scales_b.get(), 0, nscales * 4, ctx.stream()));
        swiglu(ctx, s);
        act_quant_rows(ctx, s.h, rows, I, codes_a.get(), scales_a.get(), row_stride, block_stride);
        swiglu_quant(ctx, {.s = s, .codes = codes_b.get(), .scales = scales_b.get(), .sf_row_stride = row_stride,
                           .sf_block_stride = block_stride});
        ctx.synchronize();
        const std::string what = std::string("swiglu_quant") + (block_major ? " block-major" : " row-major") +
                                 (weighted ? " weighted" : "") + " limit " + std::to_string(limit);
        const std::vector<uint8_t> codes = codes_b.download(what);
        EXPECT_EQ(codes, codes_a.download(what)) << what;
        const std::vector<float> scales = scales_b.download(what);
        EXPECT_EQ(scales, scales_a.download(what)) << what;
        // The twin: h = bf16(w * silu(min(g, L)) * clamp(u)), then core/quant.h's act_quant_fp8 per row.
        std::vector<float> hv(static_cast<size_t>(I));
        std::vector<uint8_t> ref_codes(static_cast<size_t>(I)), e8(static_cast<size_t>(I / 128));
        for (int64_t r = 0; r < rows; ++r) {
          for (int i = 0; i < I; ++i) {
            float g = gu[size_t(r * 2 * I + i)], u = gu[size_t(r * 2 * I + I + i)];
            if (limit > 0) g = std::min(g, limit), u = std::clamp(u, -limit, limit);
            hv[size_t(i)] = dsv4::round_bf16((weighted ? w[size_t(r)] : 1.0f) * (cpu::silu(g) * u));
          }
          dsv4::act_quant_fp8(hv.data(), I, 128, ref_codes.data(), e8.data());
          int bad = 0;
          for (int i = 0; i < I; ++i) bad += codes[size_t(r * I + i)] != ref_codes[size_t(i)];
          for (int b = 0; b < I / 128; ++b)
            bad += scales[size_t(r * row_stride + b * block_stride)] != e8m0_to_f32(e8[size_t(b)]);
          EXPECT_LE(bad, 0) << what << " row " << r << ": codes or scales off the twin";
        }
      }
}

TEST(CudaMoeOps, CombineInExpertOrder) {
  DSV4_REQUIRE_HOPPER();
  DeviceContext ctx;
  Rng rng(41);
  const int64_t T = 5;
  const int k = 6;
  for (const int D : {512, 514}) {  // 8 columns per thread; 2 (D % 8 != 0)
  std::vector<float> y2 = rng.bf16_normal(size_t(T * k * D)), sh = rng.bf16_normal(size_t(T * D));
  std::vector<int32_t> ids;
  for (int64_t i = 0; i < T * k; ++i) ids.push_back(rng.uniform_int(0, 7));  // duplicates on purpose
  DeviceBuffer<uint16_t> dy2 = upload_bf16(y2), dsh = upload_bf16(sh);
  DeviceBuffer<int32_t> dids(ids);
  Guarded<uint16_t> y(size_t(T * D));
  MoeCombineParams p;
  p.y2 = as_bf16(dy2);
  p.ids = dids.get();
  p.shared = as_bf16(dsh);
  p.y = reinterpret_cast<bf16*>(y.get());
  p.T = T;
  p.k = k;
  p.D = D;
  moe_combine(ctx, p);
  ctx.synchronize();
  std::vector<float> ref(size_t(T * D), 0.0f);
  for (int64_t t = 0; t < T; ++t) {
    for (int e = 0; e < 8; ++e)  // Model::moe: experts ascending, picks of one expert in pick order
      for (int j = 0; j < k; ++j)
        if (ids[size_t(t * k + j)] == e)
          for (int c = 0; c < D; ++c) ref[size_t(t * D + c)] += y2[size_t((t * k + j) * D + c)];
    for (int c = 0; c < D; ++c) ref[size_t(t * D + c)] = dsv4::round_bf16(ref[size_t(t * D + c)] + sh[size_t(t * D + c)]);
  }
  EXPECT_TRUE(compare("combine D=" + std::to_string(D), from_bf16(y.download("y")), ref, Tol::Exact).ok);
  }
}

}  // namespace
}  // namespace dsv4::cuda::test
