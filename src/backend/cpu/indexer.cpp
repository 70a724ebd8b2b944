// The lightning indexer (MODEL.md §4.3) of CSA layers.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>

#include "backend/cpu/ops.h"
#include "backend/cpu/rope_util.h"
#include "backend/cpu/indexer.h"

namespace dsv4 {

// Lightning indexer (§4.3): for each query of the chunk, the top-k visible entries of the CSA layer.
std::vector<std::vector<int64_t>> index_topk(const IndexerF& w, const CompressorState& keys, const EntryView& key_rows,
                                             const Tensor& x,
                                             const Tensor& cq, int64_t p0, const std::vector<float>& inv_freq,
                                             const ModelConfig& cfg, const QuantSim& q) {
  const int64_t T = x.dim(0), D = x.dim(1), HI = cfg.index_n_heads, dI = cfg.index_head_dim, m = keys.ratio;
  Tensor qi({T, HI * dI}), wt({T, HI});
  q.linear(w.wq_b, cq, qi);
  cpu::matmul(x.ptr(), T, D, w.weights_proj.ptr(), HI, wt.ptr());
  q.bf16(wt.ptr(), wt.numel());
  const float wscale = float(1.0 / std::sqrt(double(dI)) / std::sqrt(double(HI)));
  std::vector<std::vector<int64_t>> out(static_cast<size_t>(T));
  std::vector<float> score;
  // The keys any query of the chunk can see, read once (records unpacked).
  const int64_t nkeys = std::min((p0 + T) / m, keys.n_entries);
  std::vector<float> key(size_t(nkeys * dI));
  key_rows.read(0, nkeys, key.data());
  for (int64_t t = 0; t < T; ++t) {
    const int64_t pos = p0 + t;
    float* qt = qi.row(t);
    rope_heads(qt, HI, dI, inv_freq, pos, false);
    for (int64_t h = 0; h < HI; ++h) q.indexer_query(qt + h * dI, dI);
    const int64_t nvis = std::min((pos + 1) / m, keys.n_entries);
    score.assign(size_t(nvis), 0.0f);
    for (int64_t s = 0; s < nvis; ++s) {
      const float* k = &key[size_t(s * dI)];
      float total = 0;
      for (int64_t h = 0; h < HI; ++h) {
        float dot = 0;
        for (int64_t i = 0; i < dI; ++i) dot += qt[h * dI + i] * k[i];
        total += q.index_score(q.index_score(std::max(dot, 0.0f)) * q.index_score(wt.row(t)[h] * wscale));
      }
      score[size_t(s)] = q.index_score(total);
    }
    std::vector<int64_t> idx(static_cast<size_t>(nvis));
    std::iota(idx.begin(), idx.end(), 0);
    const int64_t k = std::min<int64_t>(cfg.index_topk, nvis);
    std::partial_sort(idx.begin(), idx.begin() + k, idx.end(), [&](int64_t a, int64_t b) {
      return score[size_t(a)] != score[size_t(b)] ? score[size_t(a)] > score[size_t(b)] : a < b;
    });
    idx.resize(static_cast<size_t>(k));
    out[size_t(t)] = std::move(idx);
  }
  return out;
}

}  // namespace dsv4
