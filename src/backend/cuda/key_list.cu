// Key lists of the sparse attention and the window-ring write (contracts in attn_ops.h; CPU twin: the
// key gathering of Model::attention in src/model/attention.cpp).
#include "backend/cuda/attn_ops.h"
#include "backend/cuda/check.h"
#include "backend/cuda/kernel_util.cuh"

namespace dsv4::cuda {
namespace {

__device__ __forceinline__ int64_t imin64(int64_t a, int64_t b) { return a < b ? a : b; }

// One block per token, threads over the key slots.
__global__ void key_list_kernel(KeyListParams p) {
  const int64_t t = blockIdx.x;
  const int64_t t0 = t / p.run_len * p.run_len;
  const int64_t pos = p.positions[t], p0 = p.positions[t0], slot = p.slots[t];
  const int64_t nwin = imin64(pos + 1, p.window);
  const int64_t nvis = p.ratio > 0 ? (pos + 1) / p.ratio : 0;
  for (int k = threadIdx.x; k < p.max_keys; k += blockDim.x) {
    int64_t row = -1;
    if (k < nwin) {
      const int64_t kp = pos - nwin + 1 + k;
      row = kp >= p0 ? p.chunk_base + t0 + (kp - p0) : p.ring_base + slot * p.window + kp % p.window;
    } else if (p.ratio > 0) {
      const int64_t c = k - nwin;
      int64_t e = -1;
      if (p.selected) {
        if (c < p.topk) e = p.selected[t * p.topk + c];
      } else if (c < nvis) {
        e = c;
      }
      if (e >= 0 && e < p.max_entries) {
        const int64_t r = p.entry_rows.row(slot, e);
        if (r >= 0) row = p.pool_base + r;
      }
    }
    p.indices[t * p.max_keys + k] = int32_t(row);
  }
}

// One thread per (token, 8-element piece).
__global__ void ring_write_kernel(RingWriteParams p, int pieces, int64_t total) {
  allow_dependents();  // a fast_gemv after this kernel may start streaming its weights
  const int64_t idx = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= total) return;
  const int64_t t = idx / pieces;
  const int c = int(idx % pieces) * 8;
  const int64_t last = p.positions[t / p.run_len * p.run_len + p.run_len - 1];
  const int64_t pos = p.positions[t];
  if (pos <= last - p.window) return;  // overwritten later in this run
  const int64_t dst = p.ring_base + int64_t(p.slots[t]) * p.window + pos % p.window;
  *reinterpret_cast<uint4*>(p.kv + dst * p.dim + c) =
      *reinterpret_cast<const uint4*>(p.kv + (p.chunk_base + t) * p.dim + c);
}

}  // namespace

void build_key_list(const DeviceContext& ctx, const KeyListParams& p) {
  if (p.tokens == 0) return;
  if (!p.indices || !p.positions || !p.slots) fail("build_key_list: null pointer");
  if (p.window <= 0 || p.run_len <= 0 || p.tokens % p.run_len != 0) fail("build_key_list: bad window or runs");
  const int64_t need = p.window + (p.ratio == 0 ? 0 : p.selected ? p.topk : p.max_entries);
  if (p.max_keys < need) fail("build_key_list: max_keys ", p.max_keys, " < ", need);
  if (p.ratio > 0 && (!p.entry_rows.pages || p.entry_rows.per_page <= 0)) fail("build_key_list: no page table");
  narrow_int(p.pool_base + p.pool_rows + p.tokens + p.ring_base, "build_key_list rows");
  key_list_kernel<<<narrow_int(p.tokens, "build_key_list grid"), 256, 0, ctx.stream()>>>(p);
  DSV4_CUDA_CHECK_LAUNCH();
}

void ring_write(const DeviceContext& ctx, const RingWriteParams& p) {
  if (p.tokens == 0) return;
  if (!p.kv || !p.positions || !p.slots) fail("ring_write: null pointer");
  if (p.dim % 8 != 0 || p.window <= 0 || p.run_len <= 0 || p.tokens % p.run_len != 0)
    fail("ring_write: dim ", p.dim, " must be a multiple of 8, runs must tile the tokens");
  const int pieces = p.dim / 8;
  const int64_t total = p.tokens * pieces;
  ring_write_kernel<<<narrow_int(ceil_div(total, 256), "ring_write grid"), 256, 0, ctx.stream()>>>(p, pieces, total);
  DSV4_CUDA_CHECK_LAUNCH();
}

}  // namespace dsv4::cuda
