// Elementwise and reduction ops of the forward pass on the GPU (MODEL.md §2-§6). Each op has a CPU twin
// with the same contract (src/backend/cpu/ops.h, src/core/quant.h); tests/backend/cuda compares the two.
//
// Conventions: every op enqueues on ctx.stream() and returns without synchronizing; pointers are device
// pointers; shapes are in elements, strides in elements of the pointed-to type; bf16 is storage only —
// the arithmetic is fp32 unless a contract says otherwise. Launch-time checks (shapes, 32-bit
// narrowing) throw dsv4::Error before anything is enqueued.
#pragma once
#include <cuda_bf16.h>

#include <cstddef>
#include <cstdint>

#include "backend/cuda/context.h"
#include "backend/cuda/kv_record.h"

namespace dsv4::cuda {

using bf16 = __nv_bfloat16;

// ---- RMSNorm (MODEL.md §2): y = bf16((x * rsqrt(mean(x^2) + eps)) * w), fp32 math, one rounding.
// CPU twin: cpu::rms_norm on the bf16 values, then round_bf16.
struct RmsNormParams {
  const bf16* x = nullptr;        // [rows, dim], row stride x_stride
  const float* weight = nullptr;  // [dim] fp32 (checkpoint bf16/fp32 upcast on upload); null = unweighted
  bf16* y = nullptr;              // [rows, dim], row stride y_stride; may alias x with the same stride
  int64_t rows = 0;
  int dim = 0;                    // multiple of 8 (16-byte vector loads)
  int64_t x_stride = 0, y_stride = 0;
  float eps = 1e-6f;
  // Optional: y's act_quant_fp8 (1 x 128 blocks, fp32 scales) in the same launch, the bits of
  // act_quant_rows on y (dim % 128 == 0): codes [rows, dim] (row stride codes_stride), the scale of
  // (row r, block b) at scales[r * sf_row_stride + b * sf_block_stride].
  uint8_t* codes = nullptr;
  float* scales = nullptr;
  int64_t codes_stride = 0, sf_row_stride = 0, sf_block_stride = 0;
  // Optional, the attention's KV rows (rope_dim > 0): after the norm, the forward RoPE of the last rope_dim
  // dims at positions[row] (inv_freq [rope_dim / 2]) and the FP8 64-block snap of the others, in the same
  // launch: the bits of rms_norm, rope and fp8_kv_snap one after the other ((dim - rope_dim) % 64 == 0).
  const int32_t* positions = nullptr;
  const float* inv_freq = nullptr;
  int rope_dim = 0;
  // Optional with the KV finish, for decode steps (one token per sequence): each finished row also into
  // its sliding-window ring row, ring + (slots[row] * window + positions[row] % window) * y_stride, as
  // ring_write (attn_ops.h) copies it; the same launch.
  bf16* ring = nullptr;
  const int32_t* slots = nullptr;
  int window = 0;
};
void rms_norm(const DeviceContext& ctx, const RmsNormParams& p);
// In place on contiguous rows x [rows, dim].
inline void rms_norm_rows(const DeviceContext& ctx, bf16* x, const float* weight, int64_t rows, int64_t dim,
                          float eps) {
  RmsNormParams p;
  p.x = p.y = x;
  p.weight = weight;
  p.rows = rows;
  p.dim = int(dim);
  p.x_stride = p.y_stride = dim;
  p.eps = eps;
  rms_norm(ctx, p);
}

// ---- Interleaved RoPE on the trailing rope_dim dims of every head (MODEL.md §5), in place.
// Pair i of the rope slice (x[2i], x[2i+1]) rotates by theta = fl32(pos * inv_freq[i]) (negated when
// inverse); cos/sin and the rotation in fp32, result rounded to bf16. CPU twin: cpu::rope.
struct RopeParams {
  bf16* x = nullptr;                // [rows, heads, head_dim] with the strides below
  const int32_t* positions = nullptr;  // [rows] position of each row (token)
  const float* inv_freq = nullptr;  // [rope_dim / 2] fp32 (io/rope_freq.h)
  int64_t rows = 0;
  int heads = 1, head_dim = 0, rope_dim = 64;  // rope on dims [head_dim - rope_dim, head_dim)
  int64_t row_stride = 0, head_stride = 0;
  bool inverse = false;             // de-rotation of the attention output (MODEL.md §4.5)
};
void rope(const DeviceContext& ctx, const RopeParams& p);

// ---- FP8 activation quantization, 1 x block along each row (MODEL.md §6, core/quant.h act_quant_fp8).
// Per block: s = pow2 ceil of max(amax, 1e-4) * fl32(1/448); code = e4m3_RNE(clamp(x / s, +-448)).
// Bit-exact with act_quant_fp8 (codes and E8M0 bytes). Scales are written in either or both forms:
// E8M0 bytes (row-major) and/or fp32 with free strides — cuBLASLt's VEC128 layout for the GEMM input
// is sf_row_stride = 1, sf_block_stride = rows (block-major).
struct ActQuantParams {
  const bf16* x = nullptr;          // [rows, cols], row stride x_stride
  uint8_t* codes = nullptr;         // [rows, cols] e4m3 codes, row stride codes_stride
  uint8_t* scale_e8m0 = nullptr;    // optional [rows, cols / block], row stride e8m0_stride
  float* scale_f32 = nullptr;       // optional: (row r, block b) at r * sf_row_stride + b * sf_block_stride
  int64_t rows = 0;
  int cols = 0, block = 128;        // block 64 or 128; cols a multiple of block
  int64_t x_stride = 0, codes_stride = 0, e8m0_stride = 0;
  int64_t sf_row_stride = 0, sf_block_stride = 0;
};
void act_quant_fp8(const DeviceContext& ctx, const ActQuantParams& p);
// The common case: contiguous rows x [rows, cols] -> codes [rows, cols], 1x128 blocks, fp32 scales only.
inline void act_quant_rows(const DeviceContext& ctx, const bf16* x, int64_t rows, int64_t cols, uint8_t* codes,
                           float* scales, int64_t sf_row_stride, int64_t sf_block_stride) {
  ActQuantParams q;
  q.x = x;
  q.codes = codes;
  q.scale_f32 = scales;
  q.rows = rows;
  q.cols = int(cols);
  q.block = 128;
  q.x_stride = q.codes_stride = cols;
  q.sf_row_stride = sf_row_stride;
  q.sf_block_stride = sf_block_stride;
  act_quant_fp8(ctx, q);
}

// ---- mHC pre (MODEL.md §3, HCPre): coefficients (incl. Sinkhorn) and the collapse u = sum_j pre_j X_j.
// CPU twin: cpu::mhc_coeffs + cpu::mhc_collapse (then round_bf16 on u). n must be 4.
// Two launches: partial mixes over slices of the n*D inputs into `partial`, then per-token finish
// (coefficients are recomputed by every collapse block from the partials; they are tiny).
struct MhcPreParams {
  const bf16* X = nullptr;      // [tokens, n, D] residual streams
  const float* fn = nullptr;    // [(2+n)n, n*D] mixing projection (fp32)
  const float* base = nullptr;  // [(2+n)n]
  const float* scale = nullptr; // [3] (s_pre, s_post, s_comb)
  float* pre = nullptr;         // [tokens, n]
  float* post = nullptr;        // [tokens, n]
  float* comb = nullptr;        // [tokens, n, n], row j / column k (X'_k uses column k)
  bf16* u = nullptr;            // [tokens, D] sub-layer input
  // Optional [D]: u = rms_norm(u) * u_norm (eps norm_eps), the sub-layer's norm, in the same launch as the
  // collapse (D <= 8192; else a second launch): the bits of mhc_pre then rms_norm_rows.
  const float* u_norm = nullptr;
  float* partial = nullptr;     // workspace: mhc_pre_partial_floats(tokens, n, D) floats
  int64_t tokens = 0;
  int n = 4, D = 0;             // D a multiple of 8
  float norm_eps = 1e-6f, hc_eps = 1e-6f;
  int sinkhorn_iters = 20;
};
size_t mhc_pre_partial_floats(int64_t tokens, int n, int D);
void mhc_pre(const DeviceContext& ctx, const MhcPreParams& p);

// ---- mHC post (MODEL.md §3, HCPost): X'_k = bf16(post_k * y + sum_j comb[j][k] * X_j), fp32 math.
// CPU twin: cpu::mhc_post then round_bf16. out may alias X (each thread reads all streams of a column
// before writing them).
struct MhcPostParams {
  const bf16* X = nullptr;      // [tokens, n, D]
  const bf16* y = nullptr;      // [tokens, D] sub-layer output
  const float* post = nullptr;  // [tokens, n]
  const float* comb = nullptr;  // [tokens, n, n]
  bf16* out = nullptr;          // [tokens, n, D]
  int64_t tokens = 0;
  int n = 4, D = 0;             // D a multiple of 8
};
void mhc_post(const DeviceContext& ctx, const MhcPostParams& p);

// ---- Sparse attention with sinks, one query per token (MODEL.md §4.4), official numerics:
// z_s = (q . k_s) * scale in fp32 (index < 0 -> no key), M = max z, p_s = exp(z_s - M),
// den = sum p_s + exp(sink_h - M), o = (sum bf16(p_s) k_s) / den, rounded to bf16. K = V.
// No valid key -> o = 0. CPU twin: cpu::attend_with_sink(round_p = true) over the valid keys.
struct SparseAttentionParams {
  const bf16* q = nullptr;          // [tokens, heads, dim]
  const bf16* kv = nullptr;         // [entries, dim] key = value vectors (window ring, chunk, pool rows)
  const int32_t* indices = nullptr; // [tokens, max_keys] rows each query sees; -1 = none
  // Rows >= record_base are compact records (kv_record.h; the page pool): row e at records + (e -
  // record_base) * rec.bytes, 8-byte aligned; rows below are bf16 rows of kv. records null: all bf16.
  const uint8_t* records = nullptr;
  int64_t record_base = 0;
  KvRecordGeom rec;
  const float* sinks = nullptr;     // [heads] sink logits
  bf16* out = nullptr;              // [tokens, heads, dim]
  int64_t tokens = 0, entries = 0;  // entries: rows a key list may name (bf16 rows and records)
  int heads = 0, dim = 512, max_keys = 0;  // dim 128, 256 or 512
  float scale = 0;                  // 1/sqrt(dim)
  // Optional: the inverse RoPE of each output head's last rope_dim dims at rope_positions [tokens] with
  // rope_inv_freq [rope_dim / 2], on the bf16 outputs: the bits of sparse_attention then rope(inverse), in
  // the same launch (the tensor-core kernel: a second launch).
  const int32_t* rope_positions = nullptr;
  const float* rope_inv_freq = nullptr;
  int rope_dim = 0;
  // Optional, the split-K kernel: [tokens * heads] ints, zero before the launch and after it; the last
  // partial block of each (token, head group) combines in the same launch (the bits of the combine launch).
  // Other kernels ignore it.
  int32_t* tickets = nullptr;
};
void sparse_attention(const DeviceContext& ctx, const SparseAttentionParams& p);
// Throws dsv4::Error naming `what` when p's records do not fit its rows (geometry of dim, alignment).
void check_attention_records(const SparseAttentionParams& p, const char* what);
// The tensor-core kernel sparse_attention takes for calls above kExactLinearMaxTokens tokens (prefill
// chunks) and, in the fast tier, above kSplitAttentionMaxTokens (attention_mma.cu): fp32 logits from bf16 MMAs, online softmax (bf16(p) rounded relative to the
// running max), within Tol::Attention of the twin, not bit-exact. Heads a multiple of 64, dim 512.
bool sparse_attention_mma_supported(const DeviceContext& ctx, const SparseAttentionParams& p);
void sparse_attention_mma(const DeviceContext& ctx, const SparseAttentionParams& p);
// The fast tier's kernel for calls of up to kSplitAttentionMaxTokens tokens (decode and verify steps;
// attention_split.cu): the key list split into chunks fixed by max_keys (a row's result does not depend
// on the call's other rows), a partial softmax per chunk and one combine; bf16(p) rounded against the
// chunk's max; within Tol::Attention of the twin, not bit-exact. sparse_attention takes it under
// KernelTier::Fast when supported (dim 128 / 256 / 512, partials within the context's workspace).
inline constexpr int64_t kSplitAttentionMaxTokens = 16;
bool sparse_attention_split_supported(const DeviceContext& ctx, const SparseAttentionParams& p);
void sparse_attention_split(const DeviceContext& ctx, const SparseAttentionParams& p);

}  // namespace dsv4::cuda
