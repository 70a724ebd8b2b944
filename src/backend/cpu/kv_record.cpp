#include "backend/cpu/kv_record.h"

#include <cstring>

#include "core/dtype.h"
#include "core/error.h"
#include "core/quant.h"

namespace dsv4::cpu {
namespace {

void check_rows(const char* what, const void* x, const void* records, int64_t rows, int64_t x_stride, int dim) {
  if (rows < 0) fail(what, ": negative row count ", rows);
  if (rows > 0 && (!x || !records)) fail(what, ": null row or record pointer for ", rows, " rows");
  if (rows > 1 && x_stride < dim) fail(what, ": row stride ", x_stride, " is below the row width ", dim);
}

}  // namespace

void pack_kv_entries(const PackKvEntriesParams& p) {
  check_layout(p.layout, "pack_kv_entries");
  check_rows("pack_kv_entries", p.x, p.records, p.rows, p.x_stride, p.layout.head_dim);
  const KvEntryLayout& l = p.layout;
  for (int64_t r = 0; r < p.rows; ++r) {
    const float* x = p.x + r * p.x_stride;
    uint8_t* rec = p.records + r * l.bytes();
    // The official quantizer itself: on a row already on its grid it returns that grid's codes exactly
    // (docs/kv-records.md, "Why pack is lossless on the grid").
    act_quant_fp8(x, l.nope(), kFp8KvBlock, rec + l.codes_offset(), rec + l.scales_offset());
    for (int i = 0; i < l.rope_dim; ++i) {
      const uint16_t b = f32_to_bf16(x[l.nope() + i]);
      rec[l.rope_offset() + 2 * i] = uint8_t(b & 0xff);
      rec[l.rope_offset() + 2 * i + 1] = uint8_t(b >> 8);
    }
    std::memset(rec + l.used_bytes(), 0, size_t(l.bytes() - l.used_bytes()));
  }
}

void unpack_kv_entries(const UnpackKvEntriesParams& p) {
  check_layout(p.layout, "unpack_kv_entries");
  check_rows("unpack_kv_entries", p.x, p.records, p.rows, p.x_stride, p.layout.head_dim);
  const KvEntryLayout& l = p.layout;
  for (int64_t r = 0; r < p.rows; ++r) {
    const uint8_t* rec = p.records + r * l.bytes();
    float* x = p.x + r * p.x_stride;
    for (int i = 0; i < l.nope(); ++i)
      x[i] = e4m3_to_f32(rec[l.codes_offset() + i]) * e8m0_to_f32(rec[l.scales_offset() + i / kFp8KvBlock]);
    for (int i = 0; i < l.rope_dim; ++i)
      x[l.nope() + i] = bf16_to_f32(uint16_t(rec[l.rope_offset() + 2 * i] | rec[l.rope_offset() + 2 * i + 1] << 8));
  }
}

void pack_indexer_keys(const PackIndexerKeysParams& p) {
  check_layout(p.layout, "pack_indexer_keys");
  check_rows("pack_indexer_keys", p.x, p.records, p.rows, p.x_stride, p.layout.dim);
  const IndexerKeyLayout& l = p.layout;
  for (int64_t r = 0; r < p.rows; ++r) {
    uint8_t* rec = p.records + r * l.bytes();
    act_quant_fp4(p.x + r * p.x_stride, l.dim, kFp4Block, rec + l.codes_offset(), rec + l.scales_offset());
    std::memset(rec + l.used_bytes(), 0, size_t(l.bytes() - l.used_bytes()));
  }
}

void unpack_indexer_keys(const UnpackIndexerKeysParams& p) {
  check_layout(p.layout, "unpack_indexer_keys");
  check_rows("unpack_indexer_keys", p.x, p.records, p.rows, p.x_stride, p.layout.dim);
  const IndexerKeyLayout& l = p.layout;
  for (int64_t r = 0; r < p.rows; ++r) {
    const uint8_t* rec = p.records + r * l.bytes();
    float* x = p.x + r * p.x_stride;
    for (int i = 0; i < l.dim; ++i)
      x[i] = e2m1_to_f32(e2m1_code_at(rec + l.codes_offset(), size_t(i))) *
             e8m0_to_f32(rec[l.scales_offset() + i / kFp4Block]);
  }
}

}  // namespace dsv4::cpu
