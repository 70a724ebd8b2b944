#include "model/cpu_weights.h"

namespace dsv4 {
namespace {

Tensor dense(const TensorView& v) { return v.data ? to_tensor(v) : Tensor(); }
LinearF dense(const LinearWeight& w) {
  LinearF l;
  if (!w.present()) return l;
  static_cast<Tensor&>(l) = dequantize(w);
  l.quant_act = w.format != WeightFormat::Dense;
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
  if (a.indexer) b.attn.idx = IndexerF{dense(a.indexer->wq_b), dense(a.indexer->weights_proj), comp(a.indexer->compressor)};
  b.ffn.gate = dense(w.ffn.gate);
  b.ffn.bias = dense(w.ffn.bias);
  if (w.ffn.tid2eid.data) {
    Tensor t = to_tensor(w.ffn.tid2eid);
    b.ffn.tid2eid.assign(t.data.begin(), t.data.end());
  }
  for (const auto& e : w.ffn.experts) b.ffn.experts.push_back(expert(e));
  if (w.ffn.shared.w1.present()) b.ffn.shared = expert(w.ffn.shared);
  return b;
}

}  // namespace

CpuWeights to_cpu_weights(const Weights& w) {
  CpuWeights c;
  c.embed = dense(w.embed);
  c.head = dense(w.head);
  c.norm = dense(w.norm);
  c.hc_head = hc(w.hc_head);
  for (const auto& l : w.layers) c.layers.push_back(block(l));
  for (const auto& m : w.mtp)
    c.mtp.push_back({block(m.block), dense(m.e_proj), dense(m.h_proj), dense(m.enorm), dense(m.hnorm), dense(m.norm),
                     hc(m.hc_head)});
  return c;
}

}  // namespace dsv4
