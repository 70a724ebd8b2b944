#include "io/kv_size.h"

#include "core/error.h"
#include "core/kv_record_layout.h"

namespace dsv4 {

KvBytes kv_bytes(const ModelConfig& cfg, KvStorage s) {
  bool csa = false;
  for (const auto* list : {&cfg.layers, &cfg.mtp_layers})
    for (const LayerSpec& l : *list) csa |= l.attn == AttnKind::CSA;
  KvBytes b;
  if (s == KvStorage::Bf16) {
    b.entry_bytes = 2 * cfg.head_dim;
    b.index_key_bytes = csa ? 2 * cfg.index_head_dim : 0;
  } else {
    try {
      b.entry_bytes = kv_entry_layout(cfg.head_dim, cfg.rope_dim).bytes();
      b.index_key_bytes = csa ? indexer_key_layout(cfg.index_head_dim).bytes() : 0;
    } catch (const Error& e) {
      fail(cfg.source, ": no compact KV records for this shape: ", e.what());
    }
  }
  for (const auto* list : {&cfg.layers, &cfg.mtp_layers})
    for (const LayerSpec& l : *list) {
      ++b.window_layers;
      if (l.ratio <= 0) continue;
      b.entries_per_token += double(b.entry_bytes) / l.ratio;
      if (l.attn == AttnKind::CSA) b.index_keys_per_token += double(b.index_key_bytes) / l.ratio;
    }
  b.window_per_sequence = b.window_layers * cfg.sliding_window * b.entry_bytes;
  return b;
}

}  // namespace dsv4
