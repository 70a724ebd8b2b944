// Compact KV records on the GPU (contract in kv_record.h): one warp per row (kv_record.cuh: 64-blocks
// (FP8) as two elements per lane, 32-blocks (FP4) as one element per lane, so every block's amax is one
// warp_max).
#include <cstdint>

#include "backend/cuda/kernel_util.cuh"
#include "backend/cuda/kv_record.cuh"

namespace dsv4::cuda {
namespace {

constexpr int kRowsPerCta = 8;  // warps per block

__global__ void __launch_bounds__(kRowsPerCta * 32) pack_kv_kernel(PackKvEntriesParams p, KvRecordGeom g) {
  const int64_t row = int64_t(blockIdx.x) * kRowsPerCta + (threadIdx.x >> 5);
  if (row >= p.rows) return;
  const bf16* x = p.x + row * p.x_stride;
  rec::pack_kv_row([x](int i) { return __bfloat162float(x[i]); }, p.records + row * g.bytes, g, threadIdx.x & 31);
}

__global__ void __launch_bounds__(kRowsPerCta * 32) unpack_kv_kernel(UnpackKvEntriesParams p, KvRecordGeom g) {
  const int64_t row = int64_t(blockIdx.x) * kRowsPerCta + (threadIdx.x >> 5);
  if (row >= p.rows) return;
  const uint8_t* r = p.records + row * g.bytes;
  bf16* x = p.x + row * p.x_stride;
  for (int i = 2 * (threadIdx.x & 31); i < g.nope + g.rope; i += 64)
    *reinterpret_cast<__nv_bfloat162*>(x + i) = __float22bfloat162_rn(rec::kv_load2(r, g, i));
}

__global__ void __launch_bounds__(kRowsPerCta * 32) pack_idx_kernel(PackIndexerKeysParams p, IndexerRecordGeom g) {
  const int64_t row = int64_t(blockIdx.x) * kRowsPerCta + (threadIdx.x >> 5);
  if (row >= p.rows) return;
  const bf16* x = p.x + row * p.x_stride;
  rec::pack_indexer_row([x](int i) { return __bfloat162float(x[i]); }, p.records + row * g.bytes, g, threadIdx.x & 31);
}

__global__ void __launch_bounds__(kRowsPerCta * 32) unpack_idx_kernel(UnpackIndexerKeysParams p, IndexerRecordGeom g) {
  const int64_t row = int64_t(blockIdx.x) * kRowsPerCta + (threadIdx.x >> 5);
  if (row >= p.rows) return;
  const uint8_t* r = p.records + row * g.bytes;
  bf16* x = p.x + row * p.x_stride;
  for (int i = 2 * (threadIdx.x & 31); i < g.dim; i += 64)
    *reinterpret_cast<__nv_bfloat162*>(x + i) =
        __floats2bfloat162_rn(rec::indexer_value(r, g, i), rec::indexer_value(r, g, i + 1));
}

bool aligned(const void* ptr, uintptr_t a) { return (reinterpret_cast<uintptr_t>(ptr) & (a - 1)) == 0; }

// Launch-time checks shared by the four entry points; false when there is nothing to do.
bool check_batch(const char* what, const void* rows_ptr, const void* records, int64_t rows, int64_t x_stride, int dim,
                 uintptr_t record_align) {
  if (rows < 0) fail(what, ": negative row count ", rows);
  if (rows == 0) return false;
  if (!rows_ptr || !records) fail(what, ": null row or record pointer for ", rows, " rows");
  if (rows > 1 && x_stride < dim) fail(what, ": row stride ", x_stride, " is below the row width ", dim);
  if (x_stride % 2 != 0 || !aligned(rows_ptr, 4))
    fail(what, ": bf16 rows must be 4-byte aligned with an even row stride (bf16x2 accesses), got stride ", x_stride);
  if (!aligned(records, record_align)) fail(what, ": records must be ", record_align, "-byte aligned");
  narrow_int(ceil_div(rows, kRowsPerCta), "kv record grid");
  return true;
}

}  // namespace

void pack_kv_entries(const DeviceContext& ctx, const PackKvEntriesParams& p) {
  check_layout(p.layout, "pack_kv_entries");
  if (!check_batch("pack_kv_entries", p.x, p.records, p.rows, p.x_stride, p.layout.head_dim, kKvEntryAlign)) return;
  pack_kv_kernel<<<unsigned(ceil_div(p.rows, kRowsPerCta)), kRowsPerCta * 32, 0, ctx.stream()>>>(p, record_geom(p.layout));
  DSV4_CUDA_CHECK_LAUNCH();
}

void unpack_kv_entries(const DeviceContext& ctx, const UnpackKvEntriesParams& p) {
  check_layout(p.layout, "unpack_kv_entries");
  if (!check_batch("unpack_kv_entries", p.x, p.records, p.rows, p.x_stride, p.layout.head_dim, kKvEntryAlign)) return;
  unpack_kv_kernel<<<unsigned(ceil_div(p.rows, kRowsPerCta)), kRowsPerCta * 32, 0, ctx.stream()>>>(p,
                                                                                                  record_geom(p.layout));
  DSV4_CUDA_CHECK_LAUNCH();
}

void pack_indexer_keys(const DeviceContext& ctx, const PackIndexerKeysParams& p) {
  check_layout(p.layout, "pack_indexer_keys");
  if (!check_batch("pack_indexer_keys", p.x, p.records, p.rows, p.x_stride, p.layout.dim, kIndexerKeyAlign)) return;
  pack_idx_kernel<<<unsigned(ceil_div(p.rows, kRowsPerCta)), kRowsPerCta * 32, 0, ctx.stream()>>>(p,
                                                                                                 record_geom(p.layout));
  DSV4_CUDA_CHECK_LAUNCH();
}

void unpack_indexer_keys(const DeviceContext& ctx, const UnpackIndexerKeysParams& p) {
  check_layout(p.layout, "unpack_indexer_keys");
  if (!check_batch("unpack_indexer_keys", p.x, p.records, p.rows, p.x_stride, p.layout.dim, kIndexerKeyAlign)) return;
  unpack_idx_kernel<<<unsigned(ceil_div(p.rows, kRowsPerCta)), kRowsPerCta * 32, 0, ctx.stream()>>>(
      p, record_geom(p.layout));
  DSV4_CUDA_CHECK_LAUNCH();
}

}  // namespace dsv4::cuda
