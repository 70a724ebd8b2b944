// Compressors (MODEL.md §4.2): gated pooling of ratio-m blocks into one KV entry each, with the CSA
// overlap, then norm, RoPE at the block start and the quantization grid.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>

#include "backend/cpu/ops.h"
#include "backend/cpu/rope_util.h"
#include "backend/cpu/compressor.h"
#include "core/float_math.h"

namespace dsv4 {

// Feeds a chunk's tokens to a compressor and appends every entry whose block completes (§4.2).
void compress_chunk(const CompressorF& w, CompressorState& st, EntryView out, const Tensor& x, int64_t p0,
                    const std::vector<float>& inv_freq, const ModelConfig& cfg, const QuantSim& q, bool indexer) {
  const int64_t T = x.dim(0), D = x.dim(1), m = st.ratio, dc = st.dc, c = st.overlap ? 2 : 1, width = c * dc;
  Tensor a({T, width}), g({T, width});
  cpu::matmul(x.ptr(), T, D, w.wkv.ptr(), width, a.ptr());
  cpu::matmul(x.ptr(), T, D, w.wgate.ptr(), width, g.ptr());
  std::vector<float> entry(static_cast<size_t>(dc)), gates, vals;
  for (int64_t t = 0; t < T; ++t) {
    const int64_t pos = p0 + t, slot = pos % m;
    std::memcpy(&st.cur_a[size_t(slot * width)], a.row(t), size_t(width) * sizeof(float));
    for (int64_t i = 0; i < width; ++i) st.cur_g[size_t(slot * width + i)] = g.row(t)[i] + w.ape.row(slot)[i];
    if (slot != m - 1) continue;

    // Pool per channel: softmax over the block's gates (CSA: previous block's A-half + this B-half).
    const int64_t j = pos / m;
    for (int64_t ch = 0; ch < dc; ++ch) {
      gates.clear();
      vals.clear();
      if (st.overlap && st.have_prev)
        for (int64_t s = 0; s < m; ++s) {
          gates.push_back(st.prev_g[size_t(s * dc + ch)]);
          vals.push_back(st.prev_a[size_t(s * dc + ch)]);
        }
      const int64_t off = st.overlap ? dc : 0;
      for (int64_t s = 0; s < m; ++s) {
        gates.push_back(st.cur_g[size_t(s * width + off + ch)]);
        vals.push_back(st.cur_a[size_t(s * width + off + ch)]);
      }
      const float mx = *std::max_element(gates.begin(), gates.end());
      float den = 0, num = 0;
      for (size_t s = 0; s < gates.size(); ++s) {
        const float e = exp_f32(gates[s] - mx);
        den += e;
        num += e * vals[s];
      }
      entry[size_t(ch)] = num / den;
    }
    if (st.overlap) {
      for (int64_t s = 0; s < m; ++s)
        for (int64_t ch = 0; ch < dc; ++ch) {
          st.prev_a[size_t(s * dc + ch)] = st.cur_a[size_t(s * width + ch)];
          st.prev_g[size_t(s * dc + ch)] = st.cur_g[size_t(s * width + ch)];
        }
      st.have_prev = true;
    }
    // Post-processing: norm, RoPE at the block's first position, quantization grid.
    q.bf16(entry.data(), dc);
    cpu::rms_norm(entry.data(), 1, dc, w.norm.ptr(), float(cfg.rms_norm_eps), entry.data());
    q.bf16(entry.data(), dc);
    rope_heads(entry.data(), 1, dc, inv_freq, j * m, false);
    q.bf16(entry.data(), dc);
    if (indexer)
      q.indexer_key(entry.data(), dc);
    else
      q.kv(entry.data(), dc - int64_t(inv_freq.size()) * 2);
    out.emit(st.n_entries, m, entry.data());
    ++st.n_entries;
  }
}

}  // namespace dsv4
