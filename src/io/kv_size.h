// KV cache bytes of a config (docs/kv-records.md "Bytes per token"): what one token of context adds over
// all attention layers — main compressed entries (1/ratio of an entry per token in every CSA / HCA layer)
// and indexer keys (1/ratio per token in every CSA layer) — and what a sequence holds regardless of its
// length: a window ring of sliding_window rows in every layer. Counted over the main layers and the MTP
// blocks the config describes (sliding in every published config). Compressor partial states (fp32,
// O(1) per sequence) are not KV records and are not counted.
#pragma once
#include <cstdint>

#include "io/config.h"

namespace dsv4 {

enum class KvStorage : uint8_t {
  Bf16,     // today's device state: every entry, key and ring row as bf16 (2 bytes a dim)
  Compact,  // the records of core/kv_record_layout.h (FP8 + bf16 rope + E8M0; MXFP4 indexer keys)
};

struct KvBytes {
  int64_t entry_bytes = 0;            // one main entry / ring row
  int64_t index_key_bytes = 0;        // one indexer key (0 without CSA layers)
  double entries_per_token = 0;       // sum over compressed layers of entry_bytes / ratio
  double index_keys_per_token = 0;    // sum over CSA layers of index_key_bytes / ratio
  double per_token() const { return entries_per_token + index_keys_per_token; }
  int64_t window_layers = 0;          // layers with a window ring (every attention layer)
  int64_t window_per_sequence = 0;    // window_layers * sliding_window * entry_bytes
};

// Throws dsv4::Error naming the config when `s` is Compact and a width is off the record blocks
// (head_dim - rope_dim not a multiple of 64, or, with CSA layers, index_head_dim not a multiple of 32).
KvBytes kv_bytes(const ModelConfig& cfg, KvStorage s);

}  // namespace dsv4
