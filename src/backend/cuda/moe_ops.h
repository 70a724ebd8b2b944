// The MoE sub-layer's small ops on the GPU (MODEL.md §7): router, selection gather, token permutation
// plan, clamped SwiGLU and the combine. The expert GEMVs are fp4_gemv.h, the shared expert gemm.h.
// Each op has a CPU twin (src/model/moe.cpp holds the whole layer; tests/backend/cuda/test_moe_ops.cpp spells
// out each step on the CPU). Conventions as in ops.h: enqueued on ctx.stream(), device pointers, no
// host sync, expert ids read on the device (graph-capturable).
#pragma once
#include <cuda_bf16.h>

#include <cstdint>

#include "backend/cuda/context.h"

namespace dsv4::cuda {

using bf16 = __nv_bfloat16;

// ---- Router: s[t, e] = sqrt(softplus(x_t . gate_e)) in fp32 (softplus(z) = z for z > 20, else
// log1p(exp(z))). Selection: hash (ids = tid2eid[token]) or top-k of s + bias (ties: lower id first,
// picks in descending order). Weights = s at the picks, divided by their sum in pick order when
// norm_topk_prob, times `scaling`. CPU twin: the router part of Model::moe (cpu::matmul fp32 logits).
struct RouterParams {
  const bf16* x = nullptr;            // [T, D]
  const bf16* gate = nullptr;         // [E, D]
  const float* bias = nullptr;        // [E] (top-k)
  const int32_t* tid2eid = nullptr;   // [vocab, k] (hash); null = top-k routing
  const int32_t* token_ids = nullptr; // [T] (hash)
  float* scores = nullptr;            // [T, E] out: sqrt(softplus(logits))
  int32_t* ids = nullptr;             // [T, k] out: picked experts
  float* weights = nullptr;           // [T, k] out
  int32_t* bad = nullptr;             // optional: set to 1 when a token id or a tid2eid entry is out of range
                                      // (the pick is then clamped into range)
  int64_t T = 0, vocab = 0;
  int E = 0, D = 0, k = 0;            // D a multiple of 8; E <= 1024; k <= 16
  bool norm_topk_prob = true;
  float scaling = 1.0f;
  // Optional: one launch instead of two (scores, then the picks). [T] ints, zero before the launch and
  // after it: the last block to finish a token's scores picks its experts. E a multiple of 8.
  int32_t* tickets = nullptr;
  // Optional: x's act_quant_fp8 (1 x 128 blocks, fp32 scales; D % 128 == 0) in the same launch, the bits of
  // act_quant_rows: codes [T, D], the scale of (row t, block b) at scales[t * sf_row_stride + b * sf_block_stride].
  uint8_t* codes = nullptr;
  float* scales = nullptr;
  int64_t sf_row_stride = 0, sf_block_stride = 0;
  // Optional: `scores` already hold the logits x_t . gate_e (fp32 sums in any order: the fast tier's
  // tensor-core GEMM, CudaBackend's router plan): no scores launch; the selection turns each logit into
  // sqrt(softplus(.)) in place, then picks. Neither tickets nor codes.
  bool logits_given = false;
};
void moe_router(const DeviceContext& ctx, const RouterParams& p);

// ---- Selection gather for the per-(token, pick) expert GEMVs: selection i = t * k + j gets the FP8
// row of token t. Scales come in cuBLASLt's block-major layout (block b of row t at b * P + t) and
// leave row-major [T*k, D/128]. Exact copy. CPU twin: a loop.
struct MoeGatherParams {
  const uint8_t* xq = nullptr;  // [>= T, D] e4m3
  const float* xs = nullptr;    // [D/128, P] fp32
  uint8_t* sel_xq = nullptr;    // [T*k, D]
  float* sel_xs = nullptr;      // [T*k, D/128]
  const int32_t* rows = nullptr;  // optional [T*k]: output row i is entry rows[i] (moe_plan order)
  int64_t T = 0, P = 0;
  int k = 0, D = 0;             // D a multiple of 128
};
void moe_gather(const DeviceContext& ctx, const MoeGatherParams& p);

// ---- Row gather: dst[i] = src[rows[i] / div] for i < n, bf16 rows of D values (expert parallelism:
// the x row of each (token, pick) entry sent to a rank, entry t * k + j reading token t). Exact copy.
// CPU twin: a loop.
struct GatherRowsParams {
  const bf16* src = nullptr;      // [>= max(rows) / div + 1, D]
  const int32_t* rows = nullptr;  // [n]
  int div = 1;
  bf16* dst = nullptr;            // [n, D]
  int64_t n = 0;
  int D = 0;                      // a multiple of 8
};
void gather_rows(const DeviceContext& ctx, const GatherRowsParams& p);

// ---- Token permutation plan for a grouped expert pass: entries (t, j) -> index t * k + j, grouped by
// expert in ascending id order and, inside an expert, in entry order (the CPU's row order in
// Model::moe). counts[e], offsets[e] (offsets[E] = entries), rows[offsets[e] .. offsets[e+1]) = the
// entry indices routed to e; entry_row (optional) the inverse: entry_row[rows[r]] = r. Three launches
// that scale with the entries (chunks of 1024 entries: per-chunk histogram and in-chunk ranks, a scan
// over chunks and experts, the scatter); deterministic. CPU twin: a counting sort.
struct MoePlanParams {
  const int32_t* ids = nullptr;  // [entries] expert of each entry, in [0, E)
  int32_t* counts = nullptr;     // [E]
  int32_t* offsets = nullptr;    // [E + 1]
  int32_t* rows = nullptr;       // [entries]
  int32_t* entry_row = nullptr;  // [entries] optional
  int32_t* scratch = nullptr;    // [moe_plan_scratch_ints(entries, E)]
  int64_t entries = 0;
  int E = 0;                     // <= 4096
};
void moe_plan(const DeviceContext& ctx, const MoePlanParams& p);
// Int32 elements a plan needs (counts, offsets, rows in one buffer: counts at 0, offsets at E, rows at 2E + 1).
inline int64_t moe_plan_ints(int64_t entries, int E) { return 2 * int64_t(E) + 1 + entries; }
// Int32 elements of the plan's scratch: in-chunk ranks and per-chunk expert counts.
inline int64_t moe_plan_scratch_ints(int64_t entries, int E) { return entries + (entries + 1023) / 1024 * int64_t(E); }

// ---- Clamped SwiGLU: h = bf16(w * (silu(min(g, L)) * clamp(u, -L, L))), silu(z) = z / (1 + exp(-z));
// L = limit (0: no clamp), w = weight[row] (null: 1). CPU twin: expert_forward in src/model/moe.cpp.
struct SwigluParams {
  const bf16* g = nullptr;       // [rows, I], row stride g_stride
  const bf16* u = nullptr;       // [rows, I], row stride u_stride
  const float* weight = nullptr; // [rows] or null
  bf16* h = nullptr;             // [rows, I], row stride I
  int64_t rows = 0, g_stride = 0, u_stride = 0;
  int I = 0;                     // multiple of 2
  float limit = 0;
};
void swiglu(const DeviceContext& ctx, const SwigluParams& p);
// The routed layout: y13 [rows, 2I] = gate | up per row -> h [rows, I], times weight[row].
inline void swiglu_gate_up(const DeviceContext& ctx, const bf16* y13, const float* weight, bf16* h, int64_t rows,
                           int64_t I, float limit) {
  SwigluParams s;
  s.g = y13;
  s.u = y13 + I;
  s.g_stride = s.u_stride = 2 * I;
  s.weight = weight;
  s.h = h;
  s.rows = rows;
  s.I = int(I);
  s.limit = limit;
  swiglu(ctx, s);
}

// SwiGLU then act_quant_fp8 of h (1 x 128 blocks, fp32 scales) in one launch: the bits of swiglu followed
// by act_quant_rows on its h, which is not written (p.s.h unused). codes [rows, I] (row stride I), the
// scale of (row r, block b) at scales[r * sf_row_stride + b * sf_block_stride]; I % 128 == 0.
struct SwigluQuantParams {
  SwigluParams s;
  uint8_t* codes = nullptr;
  float* scales = nullptr;
  int64_t sf_row_stride = 0, sf_block_stride = 0;
};
void swiglu_quant(const DeviceContext& ctx, const SwigluQuantParams& p);
// The routed layout (swiglu_gate_up) fused with its quantization (scales row-major: I / 128 per row).
inline void swiglu_gate_up_quant(const DeviceContext& ctx, const bf16* y13, const float* weight, int64_t rows,
                                 int64_t I, float limit, uint8_t* codes, float* scales) {
  SwigluQuantParams q;
  q.s.g = y13;
  q.s.u = y13 + I;
  q.s.g_stride = q.s.u_stride = 2 * I;
  q.s.weight = weight;
  q.s.rows = rows;
  q.s.I = int(I);
  q.s.limit = limit;
  q.codes = codes;
  q.scales = scales;
  q.sf_row_stride = I / 128;
  q.sf_block_stride = 1;
  swiglu_quant(ctx, q);
}

// ---- Combine: y[t] = bf16(((0 + y2[t, j0]) + y2[t, j1] + ...) + shared[t]) with the picks j taken in
// ascending expert id (ties: pick order), fp32 sums — exactly Model::moe's accumulation order.
struct MoeCombineParams {
  const bf16* y2 = nullptr;      // [T*k, D] weighted routed outputs, row t * k + j
  const int32_t* ids = nullptr;  // [T, k]
  const int32_t* entry_row = nullptr;  // [T*k] optional: the y2 row of entry t * k + j (default: the entry)
  const bf16* shared = nullptr;  // [T, D] or null
  bf16* y = nullptr;             // [T, D]
  int64_t T = 0;
  int k = 0, D = 0;              // k <= 16, D a multiple of 2
};
void moe_combine(const DeviceContext& ctx, const MoeCombineParams& p);

}  // namespace dsv4::cuda
