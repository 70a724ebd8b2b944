#include "io/published_weights.h"

#include <vector>

#include "core/dtype.h"
#include "core/error.h"

namespace dsv4 {
namespace {

TensorView shaped(DType t, Shape s, uint64_t nbytes) {
  TensorView v;
  v.dtype = t;
  v.shape = std::move(s);
  v.nbytes = size_t(nbytes);
  return v;
}
TensorView shaped(DType t, Shape s) {
  const uint64_t n = uint64_t(numel(s));
  return shaped(t, s, n * uint64_t(dtype_bits(t)) / 8);
}

LinearWeight fp8_linear(int64_t out, int64_t in) {
  LinearWeight l;
  l.format = WeightFormat::FP8;
  l.out = out, l.in = in;
  l.weight = shaped(DType::F8_E4M3, {out, in});
  l.scale = shaped(DType::F8_E8M0, {(out + 127) / 128, (in + 127) / 128});
  return l;
}
LinearWeight fp4_linear(int64_t out, int64_t in) {
  LinearWeight l;
  l.format = WeightFormat::FP4;
  l.out = out, l.in = in;
  l.weight = shaped(DType::F4_E2M1, {out, in}, uint64_t(out) * uint64_t(in) / 2);
  l.scale = shaped(DType::F8_E8M0, {out, in / 32});
  return l;
}
LinearWeight bf16_linear(int64_t out, int64_t in) {
  LinearWeight l;
  l.out = out, l.in = in;
  l.weight = shaped(DType::BF16, {out, in});
  return l;
}

HcWeights published_hc(int64_t rows, int64_t width, int64_t nscale) {
  return {shaped(DType::F32, {rows, width}), shaped(DType::F32, {rows}), shaped(DType::F32, {nscale})};
}

CompressorWeights published_compressor(int64_t ratio, int64_t dc, int64_t c, int64_t D) {
  return {bf16_linear(c * dc, D), bf16_linear(c * dc, D), shaped(DType::F32, {ratio, c * dc}),
          shaped(DType::BF16, {dc})};
}

// The shapes of bind_block (io/weights.cpp), in the published dtypes.
BlockWeights published_block(const ModelConfig& cfg, const LayerSpec& spec) {
  const int64_t D = cfg.hidden_size, n = cfg.hc_mult, H = cfg.num_heads, d = cfg.head_dim;
  BlockWeights w;
  w.hc_attn = published_hc((2 + n) * n, n * D, 3);
  w.hc_ffn = published_hc((2 + n) * n, n * D, 3);
  w.attn_norm = shaped(DType::BF16, {D});
  w.ffn_norm = shaped(DType::BF16, {D});
  AttentionWeights& a = w.attn;
  a.wq_a = fp8_linear(cfg.q_lora_rank, D);
  a.q_norm = shaped(DType::BF16, {cfg.q_lora_rank});
  a.wq_b = fp8_linear(H * d, cfg.q_lora_rank);
  a.wkv = fp8_linear(d, D);
  a.kv_norm = shaped(DType::BF16, {d});
  a.wo_a = fp8_linear(cfg.o_groups * cfg.o_lora_rank, H * d / cfg.o_groups);
  a.wo_b = fp8_linear(D, cfg.o_groups * cfg.o_lora_rank);
  a.attn_sink = shaped(DType::F32, {H});
  if (spec.attn != AttnKind::Sliding)
    a.compressor = published_compressor(spec.ratio, d, spec.attn == AttnKind::CSA ? 2 : 1, D);
  if (spec.attn == AttnKind::CSA)
    a.indexer = IndexerWeights{fp8_linear(cfg.index_n_heads * cfg.index_head_dim, cfg.q_lora_rank),
                               bf16_linear(cfg.index_n_heads, D),
                               published_compressor(spec.ratio, cfg.index_head_dim, 2, D)};
  MoeWeights& m = w.ffn;
  const int64_t E = cfg.n_routed_experts, I = cfg.moe_inter_dim, Is = I * cfg.n_shared_experts;
  m.gate = bf16_linear(E, D);
  if (spec.route == RouteKind::TopK)
    m.bias = shaped(DType::F32, {E});
  else
    m.tid2eid = shaped(DType::I64, {cfg.vocab_size, cfg.experts_per_tok});
  for (int64_t e = 0; e < E; ++e) m.experts.push_back({fp4_linear(I, D), fp4_linear(D, I), fp4_linear(I, D)});
  if (cfg.n_shared_experts > 0) m.shared = {fp8_linear(Is, D), fp8_linear(D, Is), fp8_linear(Is, D)};
  return w;
}

}  // namespace

Weights published_weights(const ModelConfig& cfg, bool mtp) {
  if (mtp && cfg.dspark.present())
    fail(cfg.source, ": a DSpark config (dspark_* fields): its stages' sizes come from the checkpoint, not the config");
  const int64_t D = cfg.hidden_size, n = cfg.hc_mult, V = cfg.vocab_size;
  Weights w;
  w.embed = shaped(DType::BF16, {V, D});
  w.head = bf16_linear(V, D);
  w.norm = shaped(DType::BF16, {D});
  w.hc_head = published_hc(n, n * D, 1);
  for (int64_t i = 0; i < cfg.num_layers; ++i) w.layers.push_back(published_block(cfg, cfg.layers[size_t(i)]));
  for (const LayerSpec& s : mtp ? cfg.mtp_layers : std::vector<LayerSpec>{}) {
    LayerSpec spec = s;
    spec.route = RouteKind::TopK;  // as bind_weights: MTP blocks route by score
    MtpWeights m;
    m.block = published_block(cfg, spec);
    m.e_proj = fp8_linear(D, D);
    m.h_proj = fp8_linear(D, D);
    m.enorm = m.hnorm = m.norm = shaped(DType::BF16, {D});
    m.hc_head = published_hc(n, n * D, 1);
    w.mtp.push_back(std::move(m));
  }
  return w;
}

}  // namespace dsv4
