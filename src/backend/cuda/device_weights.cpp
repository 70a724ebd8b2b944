#include "backend/cuda/device_weights.h"

#include <vector>

#include "core/dtype.h"
#include "core/error.h"
#include "io/dummy_weights.h"  // weights_bytes

namespace dsv4::cuda {
namespace {

template <typename T>
uint64_t bytes_of(const DeviceBuffer<T>& b) {
  return b.bytes();
}
uint64_t bytes_of(const DevLinear& l) { return l.w8.codes.bytes() + l.w8.scales.bytes() + l.w16.bytes(); }
uint64_t bytes_of(const DevCompressorWeights& c) {
  return c.wkv.bytes() + c.wgate.bytes() + c.ape.bytes() + c.norm.bytes();
}
uint64_t bytes_of(const DevHc& h) { return h.fn.bytes() + h.base.bytes() + h.scale.bytes(); }

uint64_t block_device_bytes(const DevBlockWeights& b) {
  const DevAttentionWeights& a = b.attn;
  uint64_t s = bytes_of(b.hc_attn) + bytes_of(b.hc_ffn) + b.attn_norm.bytes() + b.ffn_norm.bytes();
  s += bytes_of(a.wq_a) + bytes_of(a.wq_b) + bytes_of(a.wkv) + bytes_of(a.wo_b) + a.wo_a.bytes() + a.q_norm.bytes() +
       a.kv_norm.bytes() + a.sink.bytes() + a.inv_freq.bytes();
  if (a.comp) s += bytes_of(*a.comp);
  if (a.idx) s += bytes_of(a.idx->wq_b) + a.idx->weights_proj.bytes() + bytes_of(a.idx->comp);
  const DevMoeWeights& m = b.ffn;
  s += m.gate.bytes() + m.bias.bytes() + m.tid2eid.bytes() + m.w13.bytes() + m.w13_scales.bytes() + m.w2.bytes() +
       m.w2_scales.bytes();
  for (const ExpertStack* x : {&m.w13_x, &m.w2_x})
    s += x->codes.bytes() + x->tile_scales.bytes() + x->block_scales.bytes() + x->global.bytes();
  for (const Fp8Weight* w : {&m.shared_w1, &m.shared_w2, &m.shared_w3}) s += w->codes.bytes() + w->scales.bytes();
  // Dense (bf16) routed and shared experts (the bundled model).
  s += m.w13_16.bytes() + m.w2_16.bytes() + m.shared16_w1.bytes() + m.shared16_w2.bytes() + m.shared16_w3.bytes();
  return s;
}

uint64_t block_source_bytes(const BlockWeights& b) {
  Weights one;
  one.layers.push_back(b);  // views only (cheap copies of pointers and shapes)
  return weights_bytes(one);
}

}  // namespace

DeviceBuffer<float> upload_f32(const TensorView& v) {
  std::vector<float> h(size_t(v.numel()));
  to_f32(v.dtype, v.data, 0, h.size(), h.data());
  return DeviceBuffer<float>(h);
}

DeviceBuffer<bf16> upload_bf16(const TensorView& v) {
  DeviceBuffer<bf16> d(size_t(v.numel()));
  std::vector<uint16_t> h(size_t(v.numel()));
  if (v.dtype == DType::BF16) {
    std::copy_n(reinterpret_cast<const uint16_t*>(v.data), h.size(), h.data());
  } else {
    const Tensor t = to_tensor(v);
    for (size_t i = 0; i < h.size(); ++i) h[i] = f32_to_bf16(t.data[i]);
  }
  if (!h.empty()) DSV4_CUDA_CHECK(cudaMemcpy(d.get(), h.data(), h.size() * 2, cudaMemcpyHostToDevice));
  return d;
}

DevHc upload_hc(const HcWeights& w) { return {upload_f32(w.fn), upload_f32(w.base), upload_f32(w.scale)}; }

DeviceWeights upload_weights(const DeviceContext& ctx, const ModelConfig& cfg, const Weights& w, uint64_t total_bytes,
                             const LoadProgress& progress) {
  if (w.layers.size() < size_t(cfg.num_layers))
    fail(cfg.source, ": the weights hold ", w.layers.size(), " layers, the config wants ", cfg.num_layers);
  LoadStatus st;
  st.bytes_total = total_bytes;
  auto advance = [&](uint64_t bytes, size_t tensors) {
    st.bytes_done += bytes;
    st.tensors_done += tensors;
    if (progress) progress(st);
  };
  DeviceWeights d;
  d.embed = upload_embed_weights(ctx, w, cfg);
  advance(w.embed.nbytes, 1);
  d.head = upload_head_weights(ctx, w.hc_head, w.norm, w.head, cfg);
  advance(w.head.bytes() + w.norm.nbytes + w.hc_head.fn.nbytes + w.hc_head.base.nbytes + w.hc_head.scale.nbytes, 5);
  d.device_bytes = d.embed.embed.bytes() + d.head.head.bytes() + d.head.hc_fn.bytes() + d.head.norm.bytes();
  auto upload_block = [&](const BlockWeights& b, const LayerSpec& spec) {
    DevBlockWeights db;
    db.hc_attn = upload_hc(b.hc_attn);
    db.hc_ffn = upload_hc(b.hc_ffn);
    db.attn_norm = upload_f32(b.attn_norm);
    db.ffn_norm = upload_f32(b.ffn_norm);
    db.attn = upload_attention_weights(ctx, b.attn, cfg, spec);
    db.ffn = upload_moe_weights(ctx, b.ffn, cfg, spec);
    d.device_bytes += block_device_bytes(db);
    return db;
  };
  for (int64_t i = 0; i < cfg.num_layers; ++i) {
    const BlockWeights& b = w.layers[size_t(i)];
    d.layers.push_back(upload_block(b, cfg.layers[size_t(i)]));
    advance(block_source_bytes(b), 1);
  }
  // MTP block k runs as forward layer num_layers + k (cfg.layer_at: its spec, routed top-k).
  for (size_t k = 0; k < w.mtp.size(); ++k) {
    const MtpWeights& m = w.mtp[k];
    const int64_t layer = cfg.num_layers + int64_t(k);
    DevMtpWeights dm;
    dm.block = upload_block(m.block, cfg.layer_at(layer));
    dm.e_proj = upload_linear(m.e_proj);
    dm.h_proj = upload_linear(m.h_proj);
    dm.enorm = upload_f32(m.enorm);
    dm.hnorm = upload_f32(m.hnorm);
    dm.head = upload_head_weights(ctx, m.hc_head, m.norm, w.head, cfg, d.head.weight());
    d.device_bytes += bytes_of(dm.e_proj) + bytes_of(dm.h_proj) + dm.enorm.bytes() + dm.hnorm.bytes() +
                      dm.head.hc_fn.bytes() + dm.head.hc_base.bytes() + dm.head.hc_scale.bytes() + dm.head.norm.bytes();
    d.mtp.push_back(std::move(dm));
    advance(block_source_bytes(m.block) + m.e_proj.bytes() + m.h_proj.bytes() + m.enorm.nbytes + m.hnorm.nbytes +
                m.norm.nbytes + m.hc_head.fn.nbytes + m.hc_head.base.nbytes + m.hc_head.scale.nbytes,
            1);
  }
  ctx.synchronize();
  return d;
}

}  // namespace dsv4::cuda
