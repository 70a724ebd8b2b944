#include "io/dummy_weights.h"

#include <algorithm>
#include <cstring>
#include <map>

#include "core/dtype.h"
#include "core/error.h"
#include "io/published_weights.h"

namespace dsv4 {
namespace {

uint64_t mix(uint64_t x) {  // splitmix64
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// Random bytes of one format; `tile` bytes are generated and repeated to fill the pool.
void fill_pool(std::vector<uint8_t>& p, DType t, uint64_t seed, int64_t experts, int64_t topk) {
  const size_t tile = std::min<size_t>(p.size(), size_t(8) << 20);
  for (size_t i = 0; i < tile; i += 8) {
    const uint64_t r = mix(seed * 0x100000001b3ull + i);
    for (size_t b = 0; b < 8 && i + b < tile; ++b) {
      const uint8_t byte = uint8_t(r >> (8 * b));
      uint8_t& o = p[i + b];
      switch (t) {
        case DType::F8_E4M3: o = (byte & 0x7f) == 0x7f ? byte ^ 0x01 : byte; break;  // no NaN code
        case DType::F8_E8M0: o = uint8_t(116 + byte % 5); break;                     // 2^-11 .. 2^-7
        case DType::BF16:  // little-endian bf16: low byte = mantissa bits, high byte = sign + exponent
          o = (b & 1) ? uint8_t((byte & 0x80) | 0x3c) : byte;  // |x| in [2^-7, 2^-5): 0x3c.. exponents
          break;
        case DType::F32:  // little-endian f32: top byte sign + exponent -> |x| < 2^-4
          o = (b % 4 == 3) ? uint8_t((byte & 0x80) | 0x3d) : byte;
          break;
        default: o = byte; break;  // packed e2m1: every nibble is a finite value
      }
    }
  }
  if (t == DType::I32) {  // tid2eid: k distinct valid expert ids per token
    auto* ids = reinterpret_cast<int32_t*>(p.data());
    const size_t rows = p.size() / 4 / size_t(topk);
    for (size_t r = 0; r < rows; ++r)
      for (int64_t j = 0; j < topk; ++j)
        ids[r * size_t(topk) + size_t(j)] = int32_t((mix(seed + r) % uint64_t(experts) + uint64_t(j * (experts / topk))) %
                                                    uint64_t(experts));
    return;
  }
  for (size_t off = tile; off < p.size(); off += tile) std::memcpy(p.data() + off, p.data(), std::min(tile, p.size() - off));
}

}  // namespace

void for_each_view(Weights& w, const std::function<void(TensorView&)>& fn) {
  auto lin = [&](LinearWeight& l) {
    if (l.weight.nbytes) fn(l.weight);
    if (l.scale.nbytes) fn(l.scale);
  };
  auto hcw = [&](HcWeights& h) {
    fn(h.fn);
    fn(h.base);
    fn(h.scale);
  };
  auto comp = [&](CompressorWeights& c) {
    lin(c.wkv);
    lin(c.wgate);
    fn(c.ape);
    fn(c.norm);
  };
  auto opt = [&](TensorView& v) {
    if (v.nbytes) fn(v);
  };
  auto blk = [&](BlockWeights& b) {
    hcw(b.hc_attn);
    hcw(b.hc_ffn);
    fn(b.attn_norm);
    fn(b.ffn_norm);
    AttentionWeights& a = b.attn;
    for (LinearWeight* l : {&a.wq_a, &a.wq_b, &a.wkv, &a.wo_a, &a.wo_b}) lin(*l);
    fn(a.q_norm);
    fn(a.kv_norm);
    fn(a.attn_sink);
    if (a.compressor) comp(*a.compressor);
    if (a.indexer) {
      lin(a.indexer->wq_b);
      lin(a.indexer->weights_proj);
      comp(a.indexer->compressor);
    }
    lin(b.ffn.gate);
    opt(b.ffn.bias);
    opt(b.ffn.tid2eid);
    for (ExpertWeights& e : b.ffn.experts) {
      lin(e.w1);
      lin(e.w2);
      lin(e.w3);
    }
    lin(b.ffn.shared.w1);
    lin(b.ffn.shared.w2);
    lin(b.ffn.shared.w3);
  };
  fn(w.embed);
  lin(w.head);
  fn(w.norm);
  hcw(w.hc_head);
  for (BlockWeights& b : w.layers) blk(b);
  for (MtpWeights& m : w.mtp) {
    blk(m.block);
    lin(m.e_proj);
    lin(m.h_proj);
    fn(m.enorm);
    fn(m.hnorm);
    fn(m.norm);
    hcw(m.hc_head);
  }
}

void for_each_view(const Weights& w, const std::function<void(const TensorView&)>& fn) {
  for_each_view(const_cast<Weights&>(w), [&](TensorView& v) { fn(v); });
}

uint64_t weights_bytes(const Weights& w) {
  uint64_t total = 0;
  for_each_view(w, [&](const TensorView& v) { total += v.nbytes; });
  return total;
}

DummyWeights::DummyWeights(const ModelConfig& cfg, uint64_t seed) : w_(published_weights(cfg, false)) {
  // tid2eid as int32 (bind_weights takes I32 or I64): fill_pool writes valid expert ids of that width.
  for (BlockWeights& b : w_.layers)
    if (TensorView& t = b.ffn.tid2eid; t.nbytes) {
      t.dtype = DType::I32;
      t.nbytes = size_t(t.numel()) * 4;
    }

  std::map<DType, size_t> largest;
  for_each_view(w_, [&](TensorView& v) { largest[v.dtype] = std::max(largest[v.dtype], v.nbytes); });
  std::map<DType, const uint8_t*> base;
  for (auto [t, bytes] : largest) {
    pools_.emplace_back(bytes);
    fill_pool(pools_.back(), t, seed + uint64_t(t), cfg.n_routed_experts, cfg.experts_per_tok);
    base[t] = pools_.back().data();
  }
  for_each_view(w_, [&](TensorView& v) { v.data = base.at(v.dtype); });
}

}  // namespace dsv4
