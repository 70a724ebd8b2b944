// THE choice of the CUDA backend's kernels for the model's linears and routed experts (issue 13): one
// table by (site, token count, tier), read by every call site and by the prepare() functions that make
// cuBLASLt plans before a graph capture. Each kernel states what it supports (fast_gemv_supports: 1-32
// tokens, no expert mode; exact_linear: anything in the official formats); the table picks among them.
//
//   site                      | exact tier                      | fast tier
//   Projection (FP8 / bf16)   | <= 512: Exact; above: Lt        | <= 32: FastGemv; above: Lt
//   SharedExpert (FP8)        | the same as Projection          | the same as Projection
//   GroupedWoA (bf16 / codes) | <= 512: Exact; above: Lt        | <= 32: FastGemv; above: Lt (strided batches)
//   CompressorF32, WeightsProj| <= 512: Exact; above: Lt        | <= 512: FastGemv; above: Lt
//   Dense (bf16 experts, shared) | Exact                        | FastGemv
//   Head (bf16, fp32 logits)  | <= 512: Exact; above: Warp      | <= 64: GemmTma; above: Lt
//   Router (bf16 gate, fp32)  | Exact (moe_router's kernels)    | < 128: Exact; from 128: Lt (logits), then the selection
//
// The router's Exact is moe_router's own scores kernels (the CPU twin's bits at every size); its Lt a
// cuBLASLt bf16 -> fp32 plan for the logits (bf16 products are exact in fp32, so only the order of the
// fp32 sums differs), whose selection launch turns them into scores (RouterParams::logits_given). H100,
// 2026-12-07: the tiled scores kernel took 209 us per 2,048-token prefill chunk of a Flash layer (fp32
// FMAs on the CUDA cores: 2.1 G of them), about 4% of the chunk; with the logits on cuBLASLt 14 + 11 us.
// Decode batches: -12 us per layer at 128 tokens, +3 at 64 (4 Flash layers, same call), hence from 128.
//
// The fast tier holds an FP8 checkpoint's wo_a as its codes (DevAttentionWeights::wo_a8, half the bytes of
// the bf16 matrix; io/memory_plan.h wo_a_as_codes): fast_gemv's FP8-weight x bf16 form up to 32 tokens,
// above that the codes widened a few groups at a time into the workspace's bf16 rows (fp8_dequant.h; the
// rows stay in L2 for the GEMM) for cuBLASLt's strided batch over those groups. Fast_gemv's token slices
// of the codes measured slower at 128 tokens (H100 2026-12-07: +64 us per layer against the bf16 plan).
// FastGemv means fast_gemv where it supports the call and exact_linear where it does not (more than 32
// tokens, expert mode); a grouped call above 32 tokens would run fast_gemv in token slices of 32 (the table
// gives wo_a cuBLASLt's strided batch there: one pass over the weight; H100 2026-12-06). Measured
// on the H200 (docs/perf-log.md, 2026-12-01): cuBLASLt beats exact_linear 5-30x on FP8 projections from
// 33 tokens; the head through fast_gemv takes 268-284 us up to 16 rows and 392 at 32, cuBLASLt 271-293
// and autotuned 254-282 us at 17-128 rows (bench_cuda_ops --head, H200 2026-12-06); gemm_tma streams it at
// 4.27 TB/s at 1 row (248 us; fast_gemv 279, 329 at 16 rows) and takes 254-267 us at 16-64 rows, but 320 at
// 128 (cuBLASLt 282).
// Where gemm_tma does not take the shape (CudaBackend::head_kernel) the head falls back to FastGemv up
// to kHeadGemvMaxRows rows, Lt above.
//
// Routed FP4 experts: PerSelection (one fp4_gemv selection per (token, pick)) below 16 tokens (the fast
// tier: DecodeSelections, fp4_grouped_decode's selection mode), Tiles (one selection per (expert, up to
// 8 plan rows), the same bits) up to 512 (the fast tier: DecodeMma), Grouped (fp4_grouped_mma on the
// tensor cores, bf16-level) above when the options allow it, else PerSelection at any size.
// Routed FP8 / NVFP4 experts (moe_expert_stack.h): exact tier exact_linear's expert mode per (token,
// pick) at every size; fast tier fp4_grouped_decode on the tensor cores at every size (its NVFP4 and
// FP8 weight formats; selection mode below 16 tokens, 16-row tiles from kDecodeMma16RowsFrom), issue 19.
#pragma once
#include <cstdint>

#include "backend/backend.h"
#include "backend/cuda/context.h"
#include "backend/cuda/linear_exact.h"

namespace dsv4::cuda {

enum class LinearSite : uint8_t {
  Projection,     // attention wq_a, wq_b, wkv, wo_b, the indexer's wq_b (FP8, or bf16 in dense checkpoints)
  SharedExpert,   // the shared expert's w1, w3, w2 (FP8)
  GroupedWoA,     // wo_a: G groups of heads through their own rows (bf16, or the fast tier's FP8 codes)
  CompressorF32,  // the compressors' wkv / wgate (bf16 operands, fp32 out)
  WeightsProj,    // the indexer's weights_proj (bf16 operands, fp32 sums, bf16 out)
  Dense,          // dense (bf16) routed experts (expert mode) and a dense shared expert
  Head,           // the logits (bf16 operands, fp32 out)
  Router,         // the MoE router's logits (bf16 x and gate, fp32 out): Exact = moe_router's own kernels
};

enum class LinearKernel : uint8_t {
  Exact,     // exact_linear: the CPU twin's bits
  FastGemv,  // fast_gemv where it supports the call, else exact_linear (grouped: token slices of 32)
  Lt,        // a cuBLASLt plan (FP8 block-scaled, bf16 or bf16 -> fp32)
  Warp,      // linear_f32's warp kernel (fp32 sums in another order)
  GemmTma,   // gemm_tma (gemm_tma.h): bf16 -> fp32 on TMA + wgmma, the fast tier's head of 17+ rows
};

// Largest head row count fast_gemv takes where gemm_tma cannot (above: cuBLASLt).
inline constexpr int64_t kHeadGemvMaxRows = 16;
// Largest head row count the fast tier gives gemm_tma (above: cuBLASLt).
inline constexpr int64_t kHeadTmaMaxRows = 64;
// Fewest tokens whose router logits the fast tier computes with cuBLASLt (below: moe_router's kernels).
inline constexpr int64_t kRouterLtMinTokens = 128;

LinearKernel linear_kernel(LinearSite site, int64_t tokens, KernelTier tier);

// The kernel of an ExactLinearParams call at a site that chose Exact or FastGemv (fast_gemv_supports
// decides within FastGemv; grouped calls above kFastGemvMaxTokens run fast_gemv in token slices).
void run_linear_kernel(const DeviceContext& ctx, LinearKernel k, const ExactLinearParams& e);
// Several linears of one input (wq_a with wkv, w1 with w3, the compressor's wkv with wgate) as one
// fast_gemv launch: true when the site chose FastGemv and fast_gemv takes every call; false, having run
// nothing, otherwise (the caller runs them one by one).
bool run_shared_input(const DeviceContext& ctx, LinearKernel k, const ExactLinearParams* calls, int n);

// Routed FP4 experts.
//   PerSelection: one fp4_gemv selection per (token, pick) (both tiers, below tiles_from; exact always).
//   Tiles: fp4_gemv expert tiles of kMoeExpertTileRows plan rows (exact tier, tiles_from..512 tokens;
//          bit-identical to PerSelection).
//   DecodeMma: fp4_grouped_decode (fast tier, tiles_from..512 tokens; H200 2026-12-01: 1.08-1.16x of the
//          experts' byte floor at 32-128 tokens vs 1.77-1.92x for Tiles), 8-row tiles up to
//          kDecodeMma16RowsFrom tokens, 16-row tiles from there.
//   DecodeSelections: fp4_grouped_decode in selection mode (fast tier, below tiles_from tokens: no plan,
//          one row per CTA in entry order, K split over a cluster where the grid would leave SMs idle).
//   Grouped: fp4_grouped_mma's prefill pass (above 512 tokens, unless grouped_prefill is off).
enum class RoutedKernel : uint8_t { PerSelection, Tiles, DecodeMma, DecodeSelections, Grouped };
inline constexpr int64_t kMoeExpertTileMinTokens = 16;
inline constexpr int kMoeExpertTileRows = 8;
inline constexpr int64_t kDecodeMma16RowsFrom = 257;
// `tiles_from`: the Tiles / DecodeMma threshold (kMoeExpertTileMinTokens; tests move it to compare paths).
RoutedKernel routed_kernel(int64_t tokens, bool grouped_prefill, KernelTier tier,
                           int64_t tiles_from = kMoeExpertTileMinTokens);
// Routed FP8 / NVFP4 experts: PerSelection (exact tier) at any token count; the fast tier DecodeSelections
// below kMoeExpertTileMinTokens, DecodeMma from there.
RoutedKernel stacked_routed_kernel(int64_t tokens, KernelTier tier);
// Whether the tier's stacked experts are uploaded in fp4_grouped_decode's layouts (the fast tier).
bool stacked_fast_layout(KernelTier tier);

}  // namespace dsv4::cuda
