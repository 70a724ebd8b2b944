// How a backend stores one compressed entry and one indexer key in its KV pages (docs/kv-pages.md,
// docs/kv-records.md). In official numerics every entry the forward attends over is on the grid of the
// compact records (the nope dims FP8 in 64-blocks with power-of-two scales, the rope dims bf16; indexer
// keys FP4 in 32-blocks), so a record holds it exactly: pack then unpack gives the same floats, and the
// logits do not change. In reference numerics the entries are plain float32 and are kept as such.
#pragma once
#include <cstdint>

#include "backend/backend.h"
#include "core/error.h"
#include "core/kv_record_layout.h"
#include "io/config.h"

namespace dsv4 {

struct KvPageFormat {
  bool records = false;     // compact records (else float32 rows)
  KvEntryLayout entry;      // records: the main entries' layout
  IndexerKeyLayout key;     // records: the indexer keys' layout
  int64_t entry_bytes = 0;  // one main entry in a page
  int64_t key_bytes = 0;    // one indexer key in a page
};

// Records in official numerics whenever the record layouts take the widths (core/kv_record_layout.h
// decides: head_dim - rope_dim a multiple of 64, index_head_dim a multiple of 32); float32 rows otherwise
// (reference numerics, or a config whose widths the records do not cover, which the official
// quantization does not cover either).
inline KvPageFormat kv_page_format(const ModelConfig& cfg, Numerics n) {
  KvPageFormat f;
  if (n == Numerics::Official) {
    try {
      f.entry = kv_entry_layout(cfg.head_dim, cfg.rope_dim);
      if (cfg.index_head_dim > 0) f.key = indexer_key_layout(cfg.index_head_dim);  // 0: no CSA, no keys
      f.records = true;
    } catch (const Error&) {
      f.records = false;  // the layouts' own check said no: rows stay float32
    }
  }
  if (f.records) {
    f.entry_bytes = f.entry.bytes();
    f.key_bytes = cfg.index_head_dim > 0 ? f.key.bytes() : 0;
  } else {
    f.entry_bytes = cfg.head_dim * int64_t(sizeof(float));
    f.key_bytes = cfg.index_head_dim * int64_t(sizeof(float));
  }
  return f;
}

}  // namespace dsv4
