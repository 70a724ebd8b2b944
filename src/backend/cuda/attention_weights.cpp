// upload_attention_weights (attention_sublayer.h): one layer's attention weights from the checkpoint views
// to the device, in the form each GEMM / kernel reads.
#include <cstring>
#include <vector>

#include "backend/cuda/attention_sublayer.h"
#include "core/dtype.h"
#include "core/error.h"
#include "io/rope_freq.h"

namespace dsv4::cuda {
namespace {

DeviceBuffer<float> upload_f32(const TensorView& v, const char* what) {
  if (!v.data) fail("upload_attention_weights: ", what, " is missing");
  std::vector<float> h(size_t(v.numel()));
  to_f32(v.dtype, v.data, 0, h.size(), h.data());
  return DeviceBuffer<float>(h);
}

DeviceBuffer<bf16> upload_bf16_values(const std::vector<float>& v) {
  std::vector<uint16_t> bits(v.size());
  for (size_t i = 0; i < v.size(); ++i) bits[i] = f32_to_bf16(v[i]);
  DeviceBuffer<bf16> d(v.size());
  if (!v.empty())
    DSV4_CUDA_CHECK(cudaMemcpy(d.get(), bits.data(), bits.size() * sizeof(uint16_t), cudaMemcpyHostToDevice));
  return d;
}

// The weight's logical values as bf16: exact for bf16 and FP8 (e4m3 x power of two) checkpoints.
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

DevCompressorWeights upload_compressor(const CompressorWeights& w, int ratio, int dc, bool overlap) {
  DevCompressorWeights d;
  d.wkv = upload_dense_bf16(w.wkv);
  d.wgate = upload_dense_bf16(w.wgate);
  d.ape = upload_f32(w.ape, "compressor ape");
  d.norm = upload_f32(w.norm, "compressor norm");
  d.ratio = ratio;
  d.dc = dc;
  d.overlap = overlap;
  return d;
}

}  // namespace

DevAttentionWeights upload_attention_weights(const DeviceContext& ctx, const AttentionWeights& w,
                                             const ModelConfig& cfg, const LayerSpec& spec) {
  (void)ctx;  // uploads are synchronous copies; the context selects the device already
  DevAttentionWeights d;
  d.spec = spec;
  d.wq_a = upload_linear(w.wq_a);
  d.wq_b = upload_linear(w.wq_b);
  d.wkv = upload_linear(w.wkv);
  d.wo_b = upload_linear(w.wo_b);
  d.wo_a = upload_dense_bf16(w.wo_a);
  d.q_norm = upload_f32(w.q_norm, "q_norm");
  d.kv_norm = upload_f32(w.kv_norm, "kv_norm");
  d.sink = upload_f32(w.attn_sink, "attn_sink");
  d.inv_freq = DeviceBuffer<float>(rope_inv_freq(cfg.rope_dim, cfg.rope_for(spec)));
  if (spec.attn != AttnKind::Sliding) {
    if (!w.compressor) fail("upload_attention_weights: a compressed layer without compressor weights");
    d.comp = upload_compressor(*w.compressor, spec.ratio, int(cfg.head_dim), spec.attn == AttnKind::CSA);
  }
  if (spec.attn == AttnKind::CSA) {
    if (!w.indexer) fail("upload_attention_weights: a CSA layer without indexer weights");
    DevIndexerWeights ix;
    ix.wq_b = upload_linear(w.indexer->wq_b);
    ix.weights_proj = upload_dense_bf16(w.indexer->weights_proj);
    ix.comp = upload_compressor(w.indexer->compressor, spec.ratio, int(cfg.index_head_dim), true);
    d.idx = std::move(ix);
  }
  return d;
}

}  // namespace dsv4::cuda
