// The CPU backend's attention ops (MODEL.md §4): Q and the shared K=V head, the compressors (CSA /
// HCA) and the lightning indexer (CSA), sparse attention with sinks over the window ring and the
// compressed entries, de-rotation and the grouped output projection.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "backend/cpu/compressor.h"
#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/indexer.h"
#include "backend/cpu/ops.h"
#include "backend/cpu/quantize.h"
#include "backend/cpu/rope_util.h"
#include "core/error.h"

namespace dsv4::cpu {

void CpuBackend::attn_qkv(int64_t layer) {
  const AttentionF& w = block_w(layer).attn;
  const int64_t T = batch_.size(), H = cfg_.num_heads, d = cfg_.head_dim, qr = cfg_.q_lora_rank;
  const float eps = float(cfg_.rms_norm_eps);
  const QuantSim q(numerics_);
  const std::vector<float>& freq = inv_freq(layer);
  // A run at position 0 starts a fresh sequence in its slot; the first layer of a layer group gives the
  // group's pages back.
  for (const Run& r : runs_) {
    if (r.p0 != 0) continue;
    state(r, layer) = make_layer_state(cfg_, cfg_.layer_at(layer), pages_->format());
    if (pages_->geometry().first_of_group(layer)) entries(r, layer, false).table->release_all(pages_->pool());
  }

  // Q: low-rank with a weighted norm, then an unweighted per-head norm, then RoPE on the tail.
  cq_ = Tensor({T, qr});
  q_ = Tensor({T, H * d});
  kv_ = Tensor({T, d});
  q.linear(w.wq_a, u_, cq_);
  rms_norm(cq_.ptr(), T, qr, w.q_norm.ptr(), eps, cq_.ptr());
  q.bf16(cq_.ptr(), cq_.numel());
  q.linear(w.wq_b, cq_, q_);
  for (int64_t t = 0; t < T; ++t) {
    q.head_norm(q_.row(t), H, d, eps);
    rope_heads(q_.row(t), H, d, freq, batch_.positions[size_t(t)], false);
  }
  q.bf16(q_.ptr(), q_.numel());
  // The single K=V head.
  q.linear(w.wkv, u_, kv_);
  rms_norm(kv_.ptr(), T, d, w.kv_norm.ptr(), eps, kv_.ptr());
  q.bf16(kv_.ptr(), kv_.numel());
  for (int64_t t = 0; t < T; ++t) {
    rope_heads(kv_.row(t), 1, d, freq, batch_.positions[size_t(t)], false);
    q.bf16(kv_.row(t), d);
    q.kv(kv_.row(t), d - cfg_.rope_dim);
  }
}

void CpuBackend::compress(int64_t layer, CompressorKind c) {
  const AttentionF& w = block_w(layer).attn;
  const QuantSim q(numerics_);
  const bool indexer = c == CompressorKind::Indexer;
  if (indexer ? !w.indexer : !w.compressor) fail("layer ", layer, " has no ", indexer ? "indexer " : "", "compressor");
  for (const Run& r : runs_) {
    LayerState& st = state(r, layer);
    compress_chunk(indexer ? w.indexer->compressor : *w.compressor, indexer ? *st.idx_comp : *st.comp,
                   entries(r, layer, indexer), rows_of(u_, r), r.p0, inv_freq(layer), cfg_, q, indexer);
  }
}

void CpuBackend::index_topk(int64_t layer) {
  const AttentionF& w = block_w(layer).attn;
  if (!w.indexer) fail("layer ", layer, " has no indexer");
  const QuantSim q(numerics_);
  topk_.assign(size_t(batch_.size()), {});
  for (const Run& r : runs_) {
    auto picks = dsv4::index_topk(*w.indexer, *state(r, layer).idx_comp, entries(r, layer, true), rows_of(u_, r),
                                  rows_of(cq_, r), r.p0, inv_freq(layer), cfg_, q);
    for (int64_t t = 0; t < r.n; ++t) topk_[size_t(r.t0 + t)] = std::move(picks[size_t(t)]);
  }
}

void CpuBackend::attend(int64_t layer) {
  const AttentionF& w = block_w(layer).attn;
  const LayerSpec spec = cfg_.layer_at(layer);
  const int64_t T = batch_.size(), H = cfg_.num_heads, d = cfg_.head_dim, Wn = cfg_.sliding_window;
  const QuantSim q(numerics_);
  const std::vector<float>& freq = inv_freq(layer);
  const float scale = float(1.0 / std::sqrt(double(d)));
  o_ = Tensor({T, H * d});
  std::vector<const float*> keys;
  const KvPageFormat& fmt = pages_->format();
  std::vector<float> ring(size_t(Wn * d)), hca, picked;  // rows read from their storage (records unpacked)
  for (const Run& r : runs_) {
    LayerState& st = state(r, layer);
    // The ring's rows of the positions before the run.
    for (int64_t p = std::max<int64_t>(0, r.p0 - Wn + 1); p < r.p0; ++p)
      load_kv_row(fmt, false, d, &st.ring[size_t((p % Wn) * fmt.entry_bytes)], &ring[size_t((p % Wn) * d)]);
    const EntryView ent = spec.attn == AttnKind::Sliding ? EntryView{} : entries(r, layer, false);
    if (spec.attn == AttnKind::HCA) {  // every entry any query of the run sees, read once
      const int64_t n = std::min((r.p0 + r.n) / spec.ratio, st.comp->n_entries);
      hca.resize(size_t(n * d));
      ent.read(0, n, hca.data());
    }
    for (int64_t i = 0; i < r.n; ++i) {
      const int64_t t = r.t0 + i, pos = r.p0 + i;
      keys.clear();
      for (int64_t p = std::max<int64_t>(0, pos - Wn + 1); p <= pos; ++p)
        keys.push_back(p >= r.p0 ? kv_.row(r.t0 + p - r.p0) : &ring[size_t((p % Wn) * d)]);
      if (spec.attn == AttnKind::HCA) {
        const int64_t nvis = std::min((pos + 1) / spec.ratio, st.comp->n_entries);
        for (int64_t j = 0; j < nvis; ++j) keys.push_back(&hca[size_t(j * d)]);
      } else if (spec.attn == AttnKind::CSA) {
        const std::vector<int64_t>& pick = topk_[size_t(t)];
        picked.resize(pick.size() * size_t(d));
        for (size_t k = 0; k < pick.size(); ++k) ent.read(pick[k], 1, &picked[k * size_t(d)]);
        for (size_t k = 0; k < pick.size(); ++k) keys.push_back(&picked[k * size_t(d)]);
      }
      for (int64_t h = 0; h < H; ++h)
        attend_with_sink(q_.row(t) + h * d, keys.data(), int64_t(keys.size()), d, scale, w.attn_sink.ptr()[h],
                         q.official(), o_.row(t) + h * d);
      q.bf16(o_.row(t), H * d);
      rope_heads(o_.row(t), H, d, freq, pos, true);
      q.bf16(o_.row(t), H * d);
    }
    for (int64_t i = 0; i < r.n; ++i)
      store_kv_row(fmt, false, d, kv_.row(r.t0 + i), &st.ring[size_t(((r.p0 + i) % Wn) * fmt.entry_bytes)]);
  }
}

void CpuBackend::attn_out(int64_t layer) {
  const AttentionF& w = block_w(layer).attn;
  const int64_t T = batch_.size(), D = cfg_.hidden_size, H = cfg_.num_heads, d = cfg_.head_dim;
  const int64_t G = cfg_.o_groups, ro = cfg_.o_lora_rank, gin = H * d / G;
  const QuantSim q(numerics_);
  // Grouped output projection: group g (heads g*H/G ..) through rows g*ro.. of wo_a, then wo_b.
  Tensor z({T, G * ro}), og({T, gin}), zg({T, ro});
  for (int64_t g = 0; g < G; ++g) {
    for (int64_t t = 0; t < T; ++t) std::memcpy(og.row(t), o_.row(t) + g * gin, size_t(gin) * sizeof(float));
    matmul(og.ptr(), T, gin, w.wo_a.row(g * ro), ro, zg.ptr());
    for (int64_t t = 0; t < T; ++t) std::memcpy(z.row(t) + g * ro, zg.row(t), size_t(ro) * sizeof(float));
  }
  q.bf16(z.ptr(), z.numel());
  y_ = Tensor({T, D});
  q.linear(w.wo_b, z, y_);
}

}  // namespace dsv4::cpu
