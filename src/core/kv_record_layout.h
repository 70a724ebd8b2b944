// Byte layouts of the compact KV records (the written contract: docs/kv-records.md). Pure layout
// arithmetic, shared by the pack / unpack twins (backend/cpu/kv_record.h, backend/cuda/kv_record.h) and
// the KV footprint of a config (io/kv_size.h).
//
// KV entry (a main compressed entry or a window-ring row, width d = head_dim, rope_dim r; nope = d - r):
//   [0, nope)                 e4m3 codes of dims 0..nope-1                       (1 byte each)
//   [nope, nope + 2r)         bf16 bits of dims nope..d-1, little endian         (2 bytes each)
//   [nope + 2r, +nope/64)     E8M0 scale byte of each 64-block of the nope dims  (1 byte each)
//   up to bytes()             zero padding to a multiple of kKvEntryAlign
//   value(i) = e4m3(code[i]) * 2^(scale[i / 64] - 127) for i < nope, bf16(rope[i - nope]) after.
//   Flash / Pro (d 512, r 64): 448 + 128 + 7 + 1 = 584 bytes.
// Indexer key (width dI):
//   [0, dI/2)                 e2m1 codes, two per byte, even index in the low nibble
//   [dI/2, dI/2 + dI/32)      E8M0 scale byte of each 32-block
//   up to bytes()             zero padding to a multiple of kIndexerKeyAlign
//   value(i) = e2m1(code[i]) * 2^(scale[i / 32] - 127).   Flash / Pro (dI 128): 64 + 4 = 68 bytes.
#pragma once
#include <cstdint>

#include "core/quant.h"

namespace dsv4 {

inline constexpr int kKvEntryAlign = 8;     // record size multiple: 8-byte loads of codes and rope
inline constexpr int kIndexerKeyAlign = 4;  // record size multiple: 4-byte loads of the packed codes

struct KvEntryLayout {
  int head_dim = 0;  // d
  int rope_dim = 0;  // r: the trailing r dims, stored as bf16
  int nope() const { return head_dim - rope_dim; }
  int blocks() const { return nope() / kFp8KvBlock; }  // E8M0 scales
  int codes_offset() const { return 0; }
  int rope_offset() const { return nope(); }
  int scales_offset() const { return nope() + 2 * rope_dim; }
  int used_bytes() const { return scales_offset() + blocks(); }
  int bytes() const { return (used_bytes() + kKvEntryAlign - 1) / kKvEntryAlign * kKvEntryAlign; }
};

struct IndexerKeyLayout {
  int dim = 0;  // dI
  int blocks() const { return dim / kFp4Block; }
  int codes_offset() const { return 0; }
  int scales_offset() const { return dim / 2; }
  int used_bytes() const { return scales_offset() + blocks(); }
  int bytes() const { return (used_bytes() + kIndexerKeyAlign - 1) / kIndexerKeyAlign * kIndexerKeyAlign; }
};

// The layout of a KV entry of width head_dim whose last rope_dim dims rotate. Throws dsv4::Error unless
// 0 <= rope_dim < head_dim <= 65536 and head_dim - rope_dim is a multiple of 64 (the FP8 blocks of the
// official numerics; the reference has no partial blocks).
KvEntryLayout kv_entry_layout(int64_t head_dim, int64_t rope_dim);
// The layout of an indexer key of width dim. Throws dsv4::Error unless 0 < dim <= 65536 and dim is a
// multiple of 32 (the FP4 blocks).
IndexerKeyLayout indexer_key_layout(int64_t dim);
// Re-checks a layout built by hand (the pack / unpack entry points call these); `what` names the caller.
void check_layout(const KvEntryLayout& l, const char* what);
void check_layout(const IndexerKeyLayout& l, const char* what);

}  // namespace dsv4
