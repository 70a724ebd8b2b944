#include "backend/cuda/device_weights.h"

#include <vector>

#include "core/dtype.h"
#include "core/error.h"
#include "io/dummy_weights.h"  // weights_bytes
#include "io/memory_plan.h"    // wo_a_as_codes

namespace dsv4::cuda {
namespace {

uint64_t bytes_of(const DevLinear& l) { return l.w8.codes.bytes() + l.w8.scales.bytes() + l.w16.bytes(); }
template <typename T>
uint64_t bytes_of(const DeviceBuffer<T>& b) {
  return b.bytes();
}
uint64_t bytes_of(const DevMoeWeights& m) {
  uint64_t s = m.gate.bytes() + m.bias.bytes() + m.tid2eid.bytes() + m.w13.bytes() + m.w13_scales.bytes() +
               m.w2.bytes() + m.w2_scales.bytes();
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
uint64_t hc_source_bytes(const HcWeights& h) { return h.fn.nbytes + h.base.nbytes + h.scale.nbytes; }

// The leaf conversions of map_model (and its hooks), counting the device bytes of every upload and the
// checkpoint bytes consumed.
class Uploader {
 public:
  Uploader(const DeviceContext& ctx, const ModelConfig& cfg, const Weights& w, uint64_t total_bytes,
           const LoadProgress& progress, ExpertRange experts)
      : ctx_(ctx), cfg_(cfg), w_(w), progress_(progress), experts_(experts) {
    st_.bytes_total = total_bytes;
  }
  uint64_t device_bytes() const { return device_bytes_; }

  DevLinear linear(const LinearWeight& w) { return counted(upload_linear(w)); }
  DeviceBuffer<bf16> matrix(const LinearWeight& w) { return counted(upload_dense_bf16(w)); }
  // wo_a: none here where the fast tier holds its FP8 codes (finish() uploads them), else the bf16 matrix.
  DeviceBuffer<bf16> wo_a(const LinearWeight& w) { return wo_a_codes(w) ? DeviceBuffer<bf16>() : matrix(w); }
  DeviceBuffer<float> vec(const TensorView& v) { return counted(upload_f32(v)); }
  DeviceBuffer<bf16> embed(const TensorView& v) {
    if (v.numel() != cfg_.vocab_size * cfg_.hidden_size)
      fail("GPU embedding: table of ", v.numel(), " values, expected V * D");
    DeviceBuffer<bf16> d = counted(upload_bf16(v));
    advance(v.nbytes, 1);
    return d;
  }
  DeviceBuffer<bf16> head(const LinearWeight& w) {  // with it the model's norm and hc_head (5 tensors)
    if (w.format != WeightFormat::Dense) fail(w.name, ": the GPU head needs a dense (bf16) weight");
    DeviceBuffer<bf16> d = counted(upload_bf16(w.weight));
    advance(w.bytes() + w_.norm.nbytes + hc_source_bytes(w_.hc_head), 5);
    return d;
  }
  DevMoeWeights moe(const MoeWeights& w, int64_t layer) {
    return counted(upload_moe_weights(ctx_, w, cfg_, cfg_.layer_at(layer), experts_));
  }
  void finish(DevAttentionWeights& a, const AttentionWeights& w, int64_t layer) {
    finish_attention_weights(a, w, cfg_, cfg_.layer_at(layer));
    device_bytes_ += a.inv_freq.bytes();
    if (wo_a_codes(w.wo_a)) {
      a.wo_a8 = upload_fp8_weight(w.wo_a.weight, w.wo_a.scale);
      device_bytes_ += a.wo_a8.codes.bytes() + a.wo_a8.scales.bytes();
    }
  }
  void finish(DevBlockWeights&, const BlockWeights& b, int64_t layer) {
    if (layer < cfg_.num_layers) advance(block_source_bytes(b), 1);  // an MTP block's with its other tensors
  }
  void finish(DevMtpWeights&, const MtpWeights& m, int64_t) {
    advance(block_source_bytes(m.block) + m.e_proj.bytes() + m.h_proj.bytes() + m.enorm.nbytes + m.hnorm.nbytes +
                m.norm.nbytes + hc_source_bytes(m.hc_head),
            1);
  }

 private:
  bool wo_a_codes(const LinearWeight& w) const {
    return ctx_.kernels() == KernelTier::Fast && wo_a_as_codes(cfg_, w);
  }
  template <typename T>
  T counted(T t) {
    device_bytes_ += bytes_of(t);
    return t;
  }
  void advance(uint64_t bytes, size_t tensors) {
    st_.bytes_done += bytes;
    st_.tensors_done += tensors;
    if (progress_) progress_(st_);
  }
  const DeviceContext& ctx_;
  const ModelConfig& cfg_;
  const Weights& w_;
  const LoadProgress& progress_;
  ExpertRange experts_;
  LoadStatus st_;
  uint64_t device_bytes_ = 0;
};

}  // namespace

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

DeviceWeights upload_weights(const DeviceContext& ctx, const ModelConfig& cfg, const Weights& w, uint64_t total_bytes,
                             const LoadProgress& progress, ExpertRange experts) {
  if (w.layers.size() < size_t(cfg.num_layers))
    fail(cfg.source, ": the weights hold ", w.layers.size(), " layers, the config wants ", cfg.num_layers);
  Uploader up(ctx, cfg, w, total_bytes, progress, experts);
  DeviceWeights d;
  static_cast<ModelT<DevLeaves>&>(d) = map_model<DevLeaves>(w, up, cfg.num_layers);
  d.device_bytes = up.device_bytes();
  ctx.synchronize();
  return d;
}

}  // namespace dsv4::cuda
