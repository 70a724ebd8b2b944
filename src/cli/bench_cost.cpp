#include "cli/bench_cost.h"

#include <algorithm>
#include <cmath>

namespace dsv4::cli {
namespace {

double fp8_bytes(double out, double in) { return out * in + std::ceil(out / 128) * std::ceil(in / 128); }
double fp4_bytes(double out, double in) { return out * in / 2 + out * in / 32; }

struct LayerShape {
  double dense_bytes = 0;   // everything but the routed experts
  double expert_bytes = 0;  // one routed expert (w1, w2, w3)
  double macs = 0;          // per token, matmuls (k experts)
};

LayerShape layer_shape(const ModelConfig& c, const LayerSpec& s) {
  const double D = double(c.hidden_size), H = double(c.num_heads), d = double(c.head_dim), qr = double(c.q_lora_rank);
  const double G = double(c.o_groups), ro = double(c.o_lora_rank), I = double(c.moe_inter_dim);
  const double E = double(c.n_routed_experts), k = double(c.experts_per_tok), n = double(c.hc_mult);
  const double HI = double(c.index_n_heads), dI = double(c.index_head_dim);
  LayerShape l;
  l.dense_bytes = fp8_bytes(qr, D) + fp8_bytes(H * d, qr) + fp8_bytes(d, D) + fp8_bytes(G * ro, H * d / G) +
                  fp8_bytes(D, G * ro);
  l.macs = qr * D + H * d * qr + d * D + G * ro * H * d / G + D * G * ro;
  if (s.attn != AttnKind::Sliding) {
    const double c2 = s.attn == AttnKind::CSA ? 2 : 1;
    l.dense_bytes += 2 * c2 * d * D * 2;
    l.macs += 2 * c2 * d * D;
  }
  if (s.attn == AttnKind::CSA) {
    l.dense_bytes += fp8_bytes(HI * dI, qr) + HI * D * 2 + 2 * 2 * dI * D * 2;
    l.macs += HI * dI * qr + HI * D + 2 * 2 * dI * D;
  }
  const double Is = I * double(c.n_shared_experts);
  l.dense_bytes += E * D * 2 + E * 4 + 3 * fp8_bytes(Is, D);  // router, bias, shared expert
  l.dense_bytes += 2 * ((2 + n) * n * n * D * 4) + 2 * D * 2;  // mHC mixes, norms
  l.macs += E * D + 3 * Is * D + k * 3 * I * D + 2 * (2 + n) * n * n * D;
  l.expert_bytes = fp4_bytes(I, D) * 2 + fp4_bytes(D, I);
  return l;
}

// Keys one query at position pos attends to, and the bytes of KV state it reads (bf16 rows).
void attention_reads(const ModelConfig& c, const LayerSpec& s, int64_t pos, double& keys, double& kv_bytes,
                     double& index_macs) {
  const double d = double(c.head_dim), dI = double(c.index_head_dim), HI = double(c.index_n_heads);
  keys = double(std::min<int64_t>(pos + 1, c.sliding_window));
  index_macs = 0;
  double entries = s.ratio > 0 ? double((pos + 1) / s.ratio) : 0;
  if (s.attn == AttnKind::CSA) {
    kv_bytes = (keys + std::min(entries, double(c.index_topk))) * d * 2 + entries * dI * 2;
    index_macs = HI * dI * entries;
    keys += std::min(entries, double(c.index_topk));
  } else {
    keys += entries;
    kv_bytes = keys * d * 2;
  }
}

double expected_distinct(double E, double k, double B) { return E * (1 - std::pow(1 - k / E, B)); }

}  // namespace

StepCost layer_decode_cost(const ModelConfig& c, int64_t i, int64_t B, int64_t pos) {
  const LayerSpec& s = c.layers[size_t(i)];
  const LayerShape l = layer_shape(c, s);
  double keys, kv, index_macs;
  attention_reads(c, s, pos, keys, kv, index_macs);
  StepCost r;
  r.bytes = l.dense_bytes + l.expert_bytes * expected_distinct(double(c.n_routed_experts), double(c.experts_per_tok),
                                                                 double(B)) +
            double(B) * kv;
  r.flops = 2 * double(B) * (l.macs + 2 * double(c.num_heads) * keys * double(c.head_dim) + index_macs);
  return r;
}

StepCost decode_cost(const ModelConfig& c, int64_t B, int64_t pos, int64_t layers) {
  const int64_t L = layers < 0 ? c.num_layers : std::min(layers, c.num_layers);
  const double V = double(c.vocab_size), D = double(c.hidden_size);
  StepCost r;
  r.bytes = V * D * 2 + double(B) * D * 2 + double(c.hc_mult) * double(c.hc_mult) * D * 4;  // head, embed rows, hc_head
  r.flops = 2 * double(B) * V * D;
  for (int64_t i = 0; i < L; ++i) {
    const StepCost l = layer_decode_cost(c, i, B, pos);
    r.bytes += l.bytes;
    r.flops += l.flops;
  }
  return r;
}

StepCost prefill_cost(const ModelConfig& c, int64_t P) {
  const double V = double(c.vocab_size), D = double(c.hidden_size);
  StepCost r;
  r.bytes = V * D * 2;
  r.flops = 2 * V * D;
  for (int64_t i = 0; i < c.num_layers; ++i) {
    const LayerSpec& s = c.layers[size_t(i)];
    const LayerShape l = layer_shape(c, s);
    r.bytes += l.dense_bytes + l.expert_bytes * double(c.n_routed_experts);
    double flops = 0;
    for (int64_t p = 0; p < P; p += std::max<int64_t>(1, P / 64)) {  // attention grows with p: sample it
      double keys, kv, index_macs;
      attention_reads(c, s, p, keys, kv, index_macs);
      flops += 2 * (2 * double(c.num_heads) * keys * double(c.head_dim) + index_macs);
    }
    r.flops += 2 * double(P) * l.macs + flops * double(std::max<int64_t>(1, P / 64));
  }
  return r;
}

}  // namespace dsv4::cli
