// The CUDA backend's leaf uploads (attention_sublayer.h) and the additions of its attention nodes: from
// the checkpoint views to the device, in the form each GEMM / kernel reads.
#include <cstring>
#include <vector>

#include "backend/cuda/attention_sublayer.h"
#include "core/dtype.h"
#include "core/error.h"
#include "io/rope_freq.h"

namespace dsv4::cuda {
namespace {

DeviceBuffer<bf16> upload_bf16_values(const std::vector<float>& v) {
  std::vector<uint16_t> bits(v.size());
  for (size_t i = 0; i < v.size(); ++i) bits[i] = f32_to_bf16(v[i]);
  DeviceBuffer<bf16> d(v.size());
  if (!v.empty())
    DSV4_CUDA_CHECK(cudaMemcpy(d.get(), bits.data(), bits.size() * sizeof(uint16_t), cudaMemcpyHostToDevice));
  return d;
}

void require(const TensorView& v, const char* what) {
  if (!v.data) fail("upload_attention_weights: ", what, " is missing");
}

void finish_compressor(DevCompressorWeights& d, const CompressorWeights& w, int ratio, int dc, bool overlap) {
  require(w.ape, "compressor ape");
  require(w.norm, "compressor norm");
  d.ratio = ratio;
  d.dc = dc;
  d.overlap = overlap;
}

}  // namespace

DeviceBuffer<float> upload_f32(const TensorView& v) {
  if (!v.data) return {};  // absent (finish_attention_weights names the attention's own)
  std::vector<float> h(size_t(v.numel()));
  to_f32(v.dtype, v.data, 0, h.size(), h.data());
  return DeviceBuffer<float>(h);
}

DeviceBuffer<bf16> upload_dense_bf16(const LinearWeight& w) {
  if (!w.present()) fail("upload_attention_weights: ", w.name, " is missing");
  const Tensor t = dequantize(w);
  for (float v : t.data)
    if (round_bf16(v) != v) fail("upload_attention_weights: ", w.name, " has values bf16 cannot hold exactly");
  return upload_bf16_values(t.data);
}

DevLinear upload_linear(const LinearWeight& w) {
  DevLinear d;
  d.out = w.out;
  d.in = w.in;
  switch (w.format) {
    case WeightFormat::FP8:
      d.fp8 = true;
      d.w8 = upload_fp8_weight(w.weight, w.scale);
      break;
    case WeightFormat::Dense:
      d.w16 = upload_dense_bf16(w);
      break;
    case WeightFormat::FP4:
    case WeightFormat::NVFP4:
      fail("upload_attention_weights: ", w.name, " is ", weight_format_name(w.format), " (only routed experts are FP4)");
  }
  return d;
}

void finish_attention_weights(DevAttentionWeights& d, const AttentionWeights& w, const ModelConfig& cfg,
                              const LayerSpec& spec) {
  require(w.q_norm, "q_norm");
  require(w.kv_norm, "kv_norm");
  require(w.attn_sink, "attn_sink");
  d.spec = spec;
  d.inv_freq = DeviceBuffer<float>(rope_inv_freq(cfg.rope_dim, cfg.rope_for(spec)));
  if (spec.attn != AttnKind::Sliding) {
    if (!d.compressor) fail("upload_attention_weights: a compressed layer without compressor weights");
    finish_compressor(*d.compressor, *w.compressor, spec.ratio, int(cfg.head_dim), spec.attn == AttnKind::CSA);
  } else {
    d.compressor.reset();
  }
  if (spec.attn == AttnKind::CSA) {
    if (!d.indexer) fail("upload_attention_weights: a CSA layer without indexer weights");
    finish_compressor(d.indexer->compressor, w.indexer->compressor, spec.ratio, int(cfg.index_head_dim), true);
  } else {
    d.indexer.reset();
  }
}

}  // namespace dsv4::cuda
