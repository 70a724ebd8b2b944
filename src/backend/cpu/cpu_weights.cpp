#include "backend/cpu/cpu_weights.h"

namespace dsv4 {
namespace {

// Decodes the checkpoint views to float32, counting progress as it goes.
class Decoder {
 public:
  Decoder(uint64_t total, LoadProgress progress, ExpertRange experts)
      : progress_(std::move(progress)), experts_(experts) {
    status_.bytes_total = total;
  }

  Tensor dense(const TensorView& v) {
    if (!v.data) return Tensor();
    Tensor t = to_tensor(v);
    advance(v.nbytes);
    return t;
  }
  LinearF dense(const LinearWeight& w) {
    LinearF l;
    if (!w.present()) return l;
    static_cast<Tensor&>(l) = dequantize(w);
    l.quant_act = w.format != WeightFormat::Dense;
    advance(w.bytes());
    return l;
  }
  HcF hc(const HcWeights& w) { return {dense(w.fn), dense(w.base), dense(w.scale)}; }
  CompressorF comp(const CompressorWeights& w) { return {dense(w.wkv), dense(w.wgate), dense(w.ape), dense(w.norm)}; }
  ExpertF expert(const ExpertWeights& w) { return {dense(w.w1), dense(w.w2), dense(w.w3)}; }

  BlockF block(const BlockWeights& w) {
    BlockF b;
    b.hc_attn = hc(w.hc_attn);
    b.hc_ffn = hc(w.hc_ffn);
    b.attn_norm = dense(w.attn_norm);
    b.ffn_norm = dense(w.ffn_norm);
    const AttentionWeights& a = w.attn;
    b.attn.wq_a = dense(a.wq_a);
    b.attn.wq_b = dense(a.wq_b);
    b.attn.wkv = dense(a.wkv);
    b.attn.wo_a = dense(a.wo_a);
    b.attn.wo_b = dense(a.wo_b);
    b.attn.q_norm = dense(a.q_norm);
    b.attn.kv_norm = dense(a.kv_norm);
    b.attn.sink = dense(a.attn_sink);
    if (a.compressor) b.attn.comp = comp(*a.compressor);
    if (a.indexer)
      b.attn.idx = IndexerF{dense(a.indexer->wq_b), dense(a.indexer->weights_proj), comp(a.indexer->compressor)};
    b.ffn.gate = dense(w.ffn.gate);
    b.ffn.bias = dense(w.ffn.bias);
    if (w.ffn.tid2eid.data) {
      Tensor t = dense(w.ffn.tid2eid);
      b.ffn.tid2eid.assign(t.data.begin(), t.data.end());
    }
    for (size_t e = 0; e < w.ffn.experts.size(); ++e) {
      const ExpertWeights& x = w.ffn.experts[e];
      if (int64_t(e) >= experts_.first && int64_t(e) < experts_.last) {
        b.ffn.experts.push_back(expert(x));
      } else {  // another rank's: skipped
        b.ffn.experts.emplace_back();
        advance(x.w1.bytes() + x.w2.bytes() + x.w3.bytes());
      }
    }
    if (w.ffn.shared.w1.present()) b.ffn.shared = expert(w.ffn.shared);
    return b;
  }

 private:
  void advance(uint64_t bytes) {
    status_.bytes_done += bytes;
    ++status_.tensors_done;
    if (progress_) progress_(status_);
  }
  LoadProgress progress_;
  ExpertRange experts_;
  LoadStatus status_;
};

}  // namespace

CpuWeights to_cpu_weights(const Weights& w, uint64_t total_bytes, LoadProgress progress, ExpertRange experts) {
  Decoder d(total_bytes, std::move(progress), experts);
  CpuWeights c;
  c.embed = d.dense(w.embed);
  c.head = d.dense(w.head);
  c.norm = d.dense(w.norm);
  c.hc_head = d.hc(w.hc_head);
  for (const auto& l : w.layers) c.layers.push_back(d.block(l));
  for (const auto& m : w.mtp)
    c.mtp.push_back({d.block(m.block), d.dense(m.e_proj), d.dense(m.h_proj), d.dense(m.enorm), d.dense(m.hnorm),
                     d.dense(m.norm), d.hc(m.hc_head)});
  return c;
}

}  // namespace dsv4
