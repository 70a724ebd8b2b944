// Attention of one layer over a chunk (MODEL.md §4): Q and the shared K=V head, the window ring,
// compressed entries (CSA / HCA), the lightning indexer (CSA), sparse attention with sinks,
// de-rotation and the grouped output projection.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>

#include "backend/cpu/ops.h"
#include "core/error.h"
#include "model/model.h"
#include "model/compressor.h"
#include "model/indexer.h"
#include "model/quantize.h"
#include "model/rope_util.h"

namespace dsv4 {

Tensor Model::attention(const AttentionF& w, const LayerSpec& spec, LayerState& st, const Tensor& x,
                        int64_t p0) const {
  const int64_t T = x.dim(0), D = cfg_.hidden_size, H = cfg_.num_heads, d = cfg_.head_dim;
  const int64_t Wn = cfg_.sliding_window, qr = cfg_.q_lora_rank, G = cfg_.o_groups, ro = cfg_.o_lora_rank;
  const float eps = float(cfg_.rms_norm_eps);
  const QuantSim q(numerics_);
  const std::vector<float> inv_freq = cpu::rope_inv_freq(cfg_.rope_dim, rope_params(cfg_.rope_for(spec)));

  // Q: low-rank with a weighted norm, then an unweighted per-head norm, then RoPE on the tail.
  Tensor cq({T, qr}), qh({T, H * d}), kv({T, d});
  q.linear(w.wq_a, x, cq);
  cpu::rms_norm(cq.ptr(), T, qr, w.q_norm.ptr(), eps, cq.ptr());
  q.bf16(cq.ptr(), cq.numel());
  q.linear(w.wq_b, cq, qh);
  for (int64_t t = 0; t < T; ++t) {
    q.head_norm(qh.row(t), H, d, eps);
    rope_heads(qh.row(t), H, d, inv_freq, p0 + t, false);
  }
  q.bf16(qh.ptr(), qh.numel());
  // The single K=V head.
  q.linear(w.wkv, x, kv);
  cpu::rms_norm(kv.ptr(), T, d, w.kv_norm.ptr(), eps, kv.ptr());
  q.bf16(kv.ptr(), kv.numel());
  for (int64_t t = 0; t < T; ++t) {
    rope_heads(kv.row(t), 1, d, inv_freq, p0 + t, false);
    q.bf16(kv.row(t), d);
    q.kv(kv.row(t), d - cfg_.rope_dim);
  }

  // Compressed entries of this chunk are emitted before any of its queries attend.
  if (st.comp) compress_chunk(*w.comp, *st.comp, x, p0, inv_freq, cfg_, q, false);
  std::vector<std::vector<int64_t>> topk;
  if (spec.attn == AttnKind::CSA) {
    compress_chunk(w.idx->comp, *st.idx_comp, x, p0, inv_freq, cfg_, q, true);
    topk = index_topk(*w.idx, *st.idx_comp, x, cq, p0, inv_freq, cfg_, q);
  }

  Tensor o({T, H * d});
  const float scale = float(1.0 / std::sqrt(double(d)));
  std::vector<const float*> keys;
  for (int64_t t = 0; t < T; ++t) {
    const int64_t pos = p0 + t;
    keys.clear();
    for (int64_t p = std::max<int64_t>(0, pos - Wn + 1); p <= pos; ++p)
      keys.push_back(p >= p0 ? kv.row(p - p0) : &st.ring[size_t((p % Wn) * d)]);
    if (spec.attn == AttnKind::HCA) {
      const int64_t nvis = std::min((pos + 1) / spec.ratio, st.comp->n_entries);
      for (int64_t j = 0; j < nvis; ++j) keys.push_back(st.comp->entry(j));
    } else if (spec.attn == AttnKind::CSA) {
      for (int64_t j : topk[size_t(t)]) keys.push_back(st.comp->entry(j));
    }
    for (int64_t h = 0; h < H; ++h)
      cpu::attend_with_sink(qh.row(t) + h * d, keys.data(), int64_t(keys.size()), d, scale, w.sink.ptr()[h],
                            q.official(), o.row(t) + h * d);
    q.bf16(o.row(t), H * d);
    rope_heads(o.row(t), H, d, inv_freq, pos, true);
    q.bf16(o.row(t), H * d);
  }
  for (int64_t t = 0; t < T; ++t) std::memcpy(&st.ring[size_t(((p0 + t) % Wn) * d)], kv.row(t), size_t(d) * sizeof(float));

  // Grouped output projection: group g (heads g*H/G ..) through rows g*ro.. of wo_a, then wo_b.
  const int64_t gin = H * d / G;
  Tensor z({T, G * ro}), og({T, gin}), zg({T, ro});
  for (int64_t g = 0; g < G; ++g) {
    for (int64_t t = 0; t < T; ++t) std::memcpy(og.row(t), o.row(t) + g * gin, size_t(gin) * sizeof(float));
    cpu::matmul(og.ptr(), T, gin, w.wo_a.row(g * ro), ro, zg.ptr());
    for (int64_t t = 0; t < T; ++t) std::memcpy(z.row(t) + g * ro, zg.row(t), size_t(ro) * sizeof(float));
  }
  q.bf16(z.ptr(), z.numel());
  Tensor out({T, D});
  q.linear(w.wo_b, z, out);
  return out;
}

}  // namespace dsv4
