// The CPU backend's MoE ops (MODEL.md §7): sqrt-softplus router in fp32, hash or biased top-k selection,
// renormalized weights x routed_scaling_factor, clamped SwiGLU experts, shared expert.
#include <algorithm>
#include <bit>
#include <cmath>
#include <numeric>

#include "backend/comm/communicator.h"
#include "backend/comm/expert_range.h"
#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/ops.h"
#include "backend/cpu/quantize.h"
#include "core/error.h"

namespace dsv4::cpu {
namespace {

// SwiGLU expert on rows x[T, D]; `weight[t]` multiplies the activation before the down projection.
Tensor expert_forward(const ExpertF& e, const Tensor& x, const std::vector<float>& weight, float limit,
                      const QuantSim& q) {
  const int64_t T = x.dim(0), I = e.w1.dim(0), D = e.w2.dim(0);
  Tensor g({T, I}), u({T, I}), y({T, D});
  q.linear(e.w1, x, g);
  q.linear(e.w3, x, u);
  for (int64_t t = 0; t < T; ++t) {
    float* gt = g.row(t);
    const float* ut = u.row(t);
    for (int64_t i = 0; i < I; ++i) {
      float gv = gt[i], uv = ut[i];
      if (limit > 0) {
        gv = std::min(gv, limit);
        uv = std::clamp(uv, -limit, limit);
      }
      gt[i] = weight[size_t(t)] * (silu(gv) * uv);
    }
  }
  q.bf16(g.ptr(), g.numel());
  q.linear(e.w2, g, y);
  return y;
}

}  // namespace

void CpuBackend::moe_route(int64_t layer) {
  const MoeF& w = block_w(layer).ffn;
  const LayerSpec spec = cfg_.layer_at(layer);
  const int64_t T = batch_.size(), D = cfg_.hidden_size, E = cfg_.n_routed_experts, K = cfg_.experts_per_tok;
  // Router in fp32.
  Tensor logits({T, E});
  matmul(u_.ptr(), T, D, w.gate.ptr(), E, logits.ptr());
  picks_.assign(size_t(T), {});  // (expert, weight) per token
  std::vector<int64_t> order(static_cast<size_t>(E));
  for (int64_t t = 0; t < T; ++t) {
    float* s = logits.row(t);
    for (int64_t e = 0; e < E; ++e) s[e] = std::sqrt(softplus(s[e]));
    auto& p = picks_[size_t(t)];
    if (spec.route == RouteKind::Hash) {
      const int32_t id = batch_.ids[size_t(t)];
      for (int64_t i = 0; i < K; ++i) {
        const int32_t e = w.tid2eid[size_t(int64_t(id) * K + i)];
        if (e < 0 || e >= E) fail("tid2eid[", id, "] names expert ", e, ", expected 0..", E - 1);
        p.emplace_back(e, s[e]);
      }
    } else {
      std::iota(order.begin(), order.end(), 0);
      const float* b = w.bias.ptr();
      std::partial_sort(order.begin(), order.begin() + K, order.end(), [&](int64_t a, int64_t c) {
        const float va = s[a] + b[a], vc = s[c] + b[c];
        return va != vc ? va > vc : a < c;
      });
      for (int64_t i = 0; i < K; ++i) p.emplace_back(order[size_t(i)], s[order[size_t(i)]]);
    }
    float sum = 0;
    for (auto& [e, v] : p) sum += v;
    for (auto& [e, v] : p) v = (cfg_.norm_topk_prob ? v / sum : v) * float(cfg_.routed_scaling_factor);
  }
}

void CpuBackend::moe_experts(int64_t layer) {
  if (comm_) return moe_experts_ranked(layer);
  const MoeF& w = block_w(layer).ffn;
  const Tensor& x = u_;
  const int64_t T = batch_.size(), D = cfg_.hidden_size, E = cfg_.n_routed_experts;
  const float limit = float(cfg_.swiglu_limit);
  const QuantSim q(numerics_);
  // Routed experts in ascending id order, each over the tokens that picked it; fp32 accumulation.
  Tensor y({T, D});
  for (int64_t e = 0; e < E; ++e) {
    std::vector<int64_t> rows;
    std::vector<float> weight;
    for (int64_t t = 0; t < T; ++t)
      for (auto& [pe, v] : picks_[size_t(t)])
        if (pe == e) {
          rows.push_back(t);
          weight.push_back(v);
        }
    if (rows.empty()) continue;
    Tensor xe({int64_t(rows.size()), D});
    for (size_t r = 0; r < rows.size(); ++r) std::copy(x.row(rows[r]), x.row(rows[r]) + D, xe.row(int64_t(r)));
    Tensor ye = expert_forward(w.experts[size_t(e)], xe, weight, limit, q);
    for (size_t r = 0; r < rows.size(); ++r)
      for (int64_t c = 0; c < D; ++c) y.row(rows[r])[c] += ye.row(int64_t(r))[c];
  }
  if (w.shared.w1.present()) {
    Tensor ys = expert_forward(w.shared, x, std::vector<float>(size_t(T), 1.0f), limit, q);
    for (int64_t i = 0; i < y.numel(); ++i) y.data[size_t(i)] += ys.data[size_t(i)];
  }
  q.bf16(y.ptr(), y.numel());
  y_ = std::move(y);
}

// Expert parallelism over comm_ (N ranks, rank r holds experts [r*E/N, (r+1)*E/N)). Every (token,
// pick) entry goes to its expert's rank as [expert, weight, x row]; each rank runs its experts over
// what it received, in ascending expert id and, within an expert, in arrival order (source rank, then
// the source's token and pick order); the outputs go back the same way and each token adds its picks
// in ascending expert id (ties in pick order), the order of the one-rank loop, so y is bit-identical.
void CpuBackend::moe_experts_ranked(int64_t layer) {
  const MoeF& w = block_w(layer).ffn;
  const Tensor& x = u_;
  const int64_t T = batch_.size(), D = cfg_.hidden_size, E = cfg_.n_routed_experts, K = cfg_.experts_per_tok;
  const int N = comm_->size();
  const int64_t per = E / N, row = D + 2;  // [expert id bits, weight, x[0..D)]
  const float limit = float(cfg_.swiglu_limit);
  const QuantSim q(numerics_);

  // Outgoing entries grouped by destination rank, each group in token then pick order.
  std::vector<int64_t> ent_t;
  std::vector<size_t> ent_j;
  std::vector<int32_t> ent_e;
  for (int64_t t = 0; t < T; ++t)
    for (size_t j = 0; j < picks_[size_t(t)].size(); ++j) {
      ent_t.push_back(t);
      ent_j.push_back(j);
      ent_e.push_back(int32_t(picks_[size_t(t)][j].first));
    }
  const ExpertDispatch plan = plan_dispatch(ent_e, per, N);
  const std::vector<size_t>& send_n = plan.send_n;
  std::vector<size_t> all_n(static_cast<size_t>(N * N)), recv_n(static_cast<size_t>(N));
  comm::all_gather<size_t>(*comm_, send_n, all_n);
  for (int p = 0; p < N; ++p) recv_n[size_t(p)] = all_n[size_t(p) * size_t(N) + size_t(comm_->rank())];

  std::vector<float> send, recv;
  for (const int32_t i : plan.order) {
    send.push_back(std::bit_cast<float>(ent_e[size_t(i)]));
    send.push_back(picks_[size_t(ent_t[size_t(i)])][ent_j[size_t(i)]].second);
    send.insert(send.end(), x.row(ent_t[size_t(i)]), x.row(ent_t[size_t(i)]) + D);
  }
  size_t n_in = 0, n_out = 0;
  for (size_t n : recv_n) n_in += n;
  for (size_t n : send_n) n_out += n;
  recv.resize(n_in * size_t(row));
  std::vector<size_t> send_f(send_n), recv_f(recv_n);
  for (size_t& n : send_f) n *= size_t(row);
  for (size_t& n : recv_f) n *= size_t(row);
  comm::all_to_all_v<float>(*comm_, send, send_f, recv, recv_f);

  // This rank's experts over what arrived; outputs in arrival order.
  std::vector<float> out(n_in * size_t(D));
  for (int64_t e = experts_.first; e < experts_.last; ++e) {
    std::vector<size_t> rows;
    std::vector<float> weight;
    for (size_t i = 0; i < n_in; ++i)
      if (std::bit_cast<int32_t>(recv[i * size_t(row)]) == int32_t(e)) {
        rows.push_back(i);
        weight.push_back(recv[i * size_t(row) + 1]);
      }
    if (rows.empty()) continue;
    Tensor xe({int64_t(rows.size()), D});
    for (size_t r = 0; r < rows.size(); ++r) std::copy_n(&recv[rows[r] * size_t(row) + 2], D, xe.row(int64_t(r)));
    const Tensor ye = expert_forward(w.experts[size_t(e)], xe, weight, limit, q);
    for (size_t r = 0; r < rows.size(); ++r) std::copy_n(ye.row(int64_t(r)), D, &out[rows[r] * size_t(D)]);
  }
  std::vector<float> back(n_out * size_t(D));
  for (size_t& n : send_f) n = n / size_t(row) * size_t(D);
  for (size_t& n : recv_f) n = n / size_t(row) * size_t(D);
  comm::all_to_all_v<float>(*comm_, out, recv_f, back, send_f);

  // Each token's pick outputs, added in ascending expert id (ties: pick order).
  std::vector<std::vector<std::pair<int64_t, const float*>>> mine(static_cast<size_t>(T));  // (expert * K + pick, row)
  for (size_t i = 0; i < ent_e.size(); ++i)
    mine[size_t(ent_t[i])].push_back(
        {int64_t(ent_e[i]) * K + int64_t(ent_j[i]), &back[size_t(plan.entry_row[i]) * size_t(D)]});
  Tensor y({T, D});
  for (int64_t t = 0; t < T; ++t) {
    auto& m = mine[size_t(t)];
    std::sort(m.begin(), m.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
    for (const auto& [key, r] : m)
      for (int64_t c = 0; c < D; ++c) y.row(t)[c] += r[c];
  }
  if (w.shared.w1.present()) {
    Tensor ys = expert_forward(w.shared, x, std::vector<float>(size_t(T), 1.0f), limit, q);
    for (int64_t n = 0; n < y.numel(); ++n) y.data[size_t(n)] += ys.data[size_t(n)];
  }
  q.bf16(y.ptr(), y.numel());
  y_ = std::move(y);
}

}  // namespace dsv4::cpu
