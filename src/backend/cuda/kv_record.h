// Pack / unpack of the compact KV records on the GPU (layouts: core/kv_record_layout.h; contract:
// docs/kv-records.md). bf16 rows in and out, as the device state holds them today; a batch of rows per
// launch, one warp per row. CPU twins: backend/cpu/kv_record.h, bit for bit (tests/backend/cuda/test_kv_record.cpp):
//   pack:   the official quantizer on each row (FP8 e4m3 + E8M0 per 64 on the nope dims, bf16 rope dims;
//           indexer keys e2m1 + E8M0 per 32), zero padding; lossless on rows already on the grid.
//   unpack: code * 2^(scale - 127) rounded to bf16, which is exact for every record pack writes
//           (FP8 values >= 2^-31, FP4 values >= 2^-127 with <= 4 significant bits).
// The kernels that read records in place (attention, indexer scores, compressor emission: kv_record.cuh)
// take a record's offsets as the plain-int geometry below.
// Conventions as in ops.h: enqueued on ctx.stream(), no sync, launch-time checks throw dsv4::Error.
#pragma once
#include <cuda_bf16.h>

#include <cstdint>

#include "backend/cuda/context.h"
#include "core/kv_record_layout.h"

namespace dsv4::cuda {

using bf16 = __nv_bfloat16;

// A KV entry record's offsets (core/kv_record_layout.h) as kernels read them; bytes 0: no records.
struct KvRecordGeom {
  int nope = 0, rope = 0, blocks = 0, rope_off = 0, scales_off = 0, used = 0, bytes = 0;
};
// An indexer key record's offsets; bytes 0: no records.
struct IndexerRecordGeom {
  int dim = 0, blocks = 0, scales_off = 0, used = 0, bytes = 0;
};
inline KvRecordGeom record_geom(const KvEntryLayout& l) {
  return {l.nope(), l.rope_dim, l.blocks(), l.rope_offset(), l.scales_offset(), l.used_bytes(), l.bytes()};
}
inline IndexerRecordGeom record_geom(const IndexerKeyLayout& l) {
  return {l.dim, l.blocks(), l.scales_offset(), l.used_bytes(), l.bytes()};
}

struct PackKvEntriesParams {
  const bf16* x = nullptr;     // [rows, head_dim], row r at r * x_stride; 4-byte aligned, x_stride even
  uint8_t* records = nullptr;  // [rows, layout.bytes()] contiguous records, 8-byte aligned
  int64_t rows = 0, x_stride = 0;
  KvEntryLayout layout;        // kv_entry_layout(head_dim, rope_dim)
};
void pack_kv_entries(const DeviceContext& ctx, const PackKvEntriesParams& p);

struct UnpackKvEntriesParams {
  const uint8_t* records = nullptr;  // [rows, layout.bytes()], 8-byte aligned
  bf16* x = nullptr;                 // [rows, head_dim], row stride x_stride; 4-byte aligned, x_stride even
  int64_t rows = 0, x_stride = 0;
  KvEntryLayout layout;
};
void unpack_kv_entries(const DeviceContext& ctx, const UnpackKvEntriesParams& p);

struct PackIndexerKeysParams {
  const bf16* x = nullptr;     // [rows, dim] Hadamard + FP4 keys (AttentionLayerState::index_keys), stride x_stride
  uint8_t* records = nullptr;  // [rows, layout.bytes()], 4-byte aligned
  int64_t rows = 0, x_stride = 0;
  IndexerKeyLayout layout;     // indexer_key_layout(dim)
};
void pack_indexer_keys(const DeviceContext& ctx, const PackIndexerKeysParams& p);

struct UnpackIndexerKeysParams {
  const uint8_t* records = nullptr;  // [rows, layout.bytes()], 4-byte aligned
  bf16* x = nullptr;                 // [rows, dim], row stride x_stride; 4-byte aligned, x_stride even
  int64_t rows = 0, x_stride = 0;
  IndexerKeyLayout layout;
};
void unpack_indexer_keys(const DeviceContext& ctx, const UnpackIndexerKeysParams& p);

}  // namespace dsv4::cuda
