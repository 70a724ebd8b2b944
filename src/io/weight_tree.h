// The shape of a DeepSeek-V4 weight tree, written once: every tree of the engine (io's checkpoint views,
// the CPU backend's float32 copies, the CUDA backend's device buffers) is these templates over a storage
// policy S, and a backend builds its tree from io's with map_model / map_block by giving only the leaf
// conversions. Field names are the checkpoint's (FORMATS.md).
//
// S names the leaf types by role:
//   S::Linear  a projection run as the model's linear: wq_a, wq_b, wkv, wo_b, the indexer's wq_b, the MTP
//              e_proj / h_proj, the experts' w1 / w2 / w3
//   S::Matrix  a weight the reference uses as plain values: wo_a (grouped einsum), the compressors' wkv /
//              wgate (fp32 products), the indexer's weights_proj, the router gate
//   S::Vec     a float tensor: norms, attn_sink, ape, the mHC parameters, the router bias
//   S::Ids     the hash router's tid2eid table
//   S::Embed, S::Head  the embedding table and the output head weight
// and the node types a backend extends with data of its own (S::Compressor, S::Attention, S::Moe);
// PlainNodes<S> makes them the plain templates.
#pragma once
#include <cstdint>
#include <optional>
#include <vector>

namespace dsv4 {

template <class S> struct CompressorT;
template <class S> struct AttentionT;
template <class S> struct MoeT;

template <class S>
struct PlainNodes {
  using Compressor = CompressorT<S>;
  using Attention = AttentionT<S>;
  using Moe = MoeT<S>;
};

template <class S>
struct HcT {                // mHC mixing parameters of one sub-layer (or the head)
  typename S::Vec fn;       // [(2+n)n, nD] f32 (head: [n, nD])
  typename S::Vec base;     // [(2+n)n] f32 (head: [n])
  typename S::Vec scale;    // [3] f32 (head: [1])
};

template <class S>
struct CompressorT {
  typename S::Matrix wkv, wgate;  // [c*d_c, D] (c = 2 with overlap), computed in fp32
  typename S::Vec ape;            // [ratio, c*d_c] f32, added to the gate
  typename S::Vec norm;           // [d_c]
};

template <class S>
struct IndexerT {
  typename S::Linear wq_b;          // [H_I*d_I, q_lora]
  typename S::Matrix weights_proj;  // [H_I, D]
  typename S::Compressor compressor;
};

template <class S>
struct AttentionT {
  typename S::Linear wq_a, wq_b, wkv;  // [q_lora, D], [H*d, q_lora], [d, D]
  typename S::Matrix wo_a;             // [G*o_lora, H*d/G]
  typename S::Linear wo_b;             // [D, G*o_lora]
  typename S::Vec q_norm, kv_norm, attn_sink;  // [q_lora], [d], [H]
  std::optional<typename S::Compressor> compressor;  // CSA / HCA
  std::optional<IndexerT<S>> indexer;                // CSA
};

template <class S>
struct ExpertT {
  typename S::Linear w1, w2, w3;  // gate [I, D], down [D, I], up [I, D]
};

template <class S>
struct MoeT {
  typename S::Matrix gate;  // router [E, D]
  typename S::Vec bias;     // [E] f32, top-k layers only
  typename S::Ids tid2eid;  // [V, k], hash layers only
  std::vector<ExpertT<S>> experts;
  ExpertT<S> shared;        // absent leaves without shared experts
};

template <class S>
struct BlockT {
  HcT<S> hc_attn, hc_ffn;
  typename S::Vec attn_norm, ffn_norm;  // [D]
  typename S::Attention attn;
  typename S::Moe ffn;
};

// MTP block k (forward layer num_layers + k): a decoder block, e_proj / h_proj, enorm / hnorm, its own
// hc_head and norm; embedding and head weight are the main model's (MODEL.md §8).
template <class S>
struct MtpT {
  BlockT<S> block;
  typename S::Linear e_proj, h_proj;  // [D, D]
  typename S::Vec enorm, hnorm, norm;  // [D]
  HcT<S> hc_head;
};

template <class S>
struct ModelT {
  typename S::Embed embed;  // [V, D]
  typename S::Head head;    // [V, D]
  typename S::Vec norm;     // [D]
  HcT<S> hc_head;
  std::vector<BlockT<S>> layers;
  std::vector<MtpT<S>> mtp;  // the mtp.K blocks present in the checkpoint (original V4 MTP)
};

// ---- The structural map: a tree over S from a tree over Src, leaf by leaf, in field order. The
// converter c has c.linear / c.matrix / c.vec / c.ids / c.embed / c.head (one per role, from Src's leaf
// to S's), and may hook in:
//   c.expert(x, e)          a routed expert e (e.g. to skip another rank's)
//   c.moe(m, layer)         the whole MoE node of layer `layer` (a backend with packed expert stacks)
//   c.wo_a(x)               the attention's wo_a (else c.matrix): a backend that may hold it in another form
//   c.finish(node, src, layer)  after an attention node, a block or an MTP block (layer: the forward
//                           index; MTP block k is layers + k), to fill the backend's additions
// The maps build the node types S names (S::Attention ...), so hooks see the backend's own nodes.
template <class S, class Src, class C>
HcT<S> map_hc(const HcT<Src>& w, C& c) {
  HcT<S> h;
  h.fn = c.vec(w.fn);
  h.base = c.vec(w.base);
  h.scale = c.vec(w.scale);
  return h;
}

template <class S, class Src, class C>
typename S::Compressor map_compressor(const typename Src::Compressor& w, C& c) {
  typename S::Compressor m;
  m.wkv = c.matrix(w.wkv);
  m.wgate = c.matrix(w.wgate);
  m.ape = c.vec(w.ape);
  m.norm = c.vec(w.norm);
  return m;
}

template <class S, class Src, class C>
typename S::Attention map_attention(const typename Src::Attention& w, C& c, int64_t layer) {
  typename S::Attention a;
  a.wq_a = c.linear(w.wq_a);
  a.wq_b = c.linear(w.wq_b);
  a.wkv = c.linear(w.wkv);
  if constexpr (requires { c.wo_a(w.wo_a); }) a.wo_a = c.wo_a(w.wo_a);
  else a.wo_a = c.matrix(w.wo_a);
  a.wo_b = c.linear(w.wo_b);
  a.q_norm = c.vec(w.q_norm);
  a.kv_norm = c.vec(w.kv_norm);
  a.attn_sink = c.vec(w.attn_sink);
  if (w.compressor) a.compressor = map_compressor<S, Src>(*w.compressor, c);
  if (w.indexer) {
    IndexerT<S> ix;
    ix.wq_b = c.linear(w.indexer->wq_b);
    ix.weights_proj = c.matrix(w.indexer->weights_proj);
    ix.compressor = map_compressor<S, Src>(w.indexer->compressor, c);
    a.indexer = std::move(ix);
  }
  if constexpr (requires { c.finish(a, w, layer); }) c.finish(a, w, layer);
  return a;
}

template <class S, class Src, class C>
ExpertT<S> map_expert(const ExpertT<Src>& w, C& c) {
  ExpertT<S> x;
  x.w1 = c.linear(w.w1);
  x.w2 = c.linear(w.w2);
  x.w3 = c.linear(w.w3);
  return x;
}

template <class S, class Src, class C>
MoeT<S> map_moe(const MoeT<Src>& w, C& c) {
  MoeT<S> m;
  m.gate = c.matrix(w.gate);
  m.bias = c.vec(w.bias);
  m.tid2eid = c.ids(w.tid2eid);
  for (size_t e = 0; e < w.experts.size(); ++e) {
    if constexpr (requires { c.expert(w.experts[e], int64_t(e)); })
      m.experts.push_back(c.expert(w.experts[e], int64_t(e)));
    else
      m.experts.push_back(map_expert<S>(w.experts[e], c));
  }
  m.shared = map_expert<S>(w.shared, c);
  return m;
}

template <class S, class Src, class C>
BlockT<S> map_block(const BlockT<Src>& w, C& c, int64_t layer) {
  BlockT<S> b;
  b.hc_attn = map_hc<S>(w.hc_attn, c);
  b.hc_ffn = map_hc<S>(w.hc_ffn, c);
  b.attn_norm = c.vec(w.attn_norm);
  b.ffn_norm = c.vec(w.ffn_norm);
  b.attn = map_attention<S, Src>(w.attn, c, layer);
  if constexpr (requires { c.moe(w.ffn, layer); })
    b.ffn = c.moe(w.ffn, layer);
  else
    b.ffn = map_moe<S>(w.ffn, c);
  if constexpr (requires { c.finish(b, w, layer); }) c.finish(b, w, layer);
  return b;
}

template <class S, class Src, class C>
MtpT<S> map_mtp(const MtpT<Src>& w, C& c, int64_t layer) {
  MtpT<S> m;
  m.block = map_block<S>(w.block, c, layer);
  m.e_proj = c.linear(w.e_proj);
  m.h_proj = c.linear(w.h_proj);
  m.enorm = c.vec(w.enorm);
  m.hnorm = c.vec(w.hnorm);
  m.norm = c.vec(w.norm);
  m.hc_head = map_hc<S>(w.hc_head, c);
  if constexpr (requires { c.finish(m, w, layer); }) c.finish(m, w, layer);
  return m;
}

// The first `layers` layers of w (all when negative) and every MTP block.
template <class S, class Src, class C>
ModelT<S> map_model(const ModelT<Src>& w, C& c, int64_t layers = -1) {
  const int64_t L = layers < 0 ? int64_t(w.layers.size()) : layers;
  ModelT<S> m;
  m.embed = c.embed(w.embed);
  m.head = c.head(w.head);
  m.norm = c.vec(w.norm);
  m.hc_head = map_hc<S>(w.hc_head, c);
  for (int64_t i = 0; i < L; ++i) m.layers.push_back(map_block<S>(w.layers[size_t(i)], c, i));
  for (size_t k = 0; k < w.mtp.size(); ++k) m.mtp.push_back(map_mtp<S>(w.mtp[k], c, L + int64_t(k)));
  return m;
}

}  // namespace dsv4
