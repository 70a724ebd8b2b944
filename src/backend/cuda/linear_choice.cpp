// The kernel table of the CUDA backend's linears (linear_choice.h).
#include "backend/cuda/linear_choice.h"

#include "backend/cuda/linear_fast.h"
#include "core/error.h"

namespace dsv4::cuda {

LinearKernel linear_kernel(LinearSite site, int64_t tokens, KernelTier tier) {
  const bool fast = tier == KernelTier::Fast, exact_range = tokens <= kExactLinearMaxTokens;
  switch (site) {
    case LinearSite::Projection:
    case LinearSite::SharedExpert:
      if (fast) return tokens <= kFastGemvMaxTokens ? LinearKernel::FastGemv : LinearKernel::Lt;
      return exact_range ? LinearKernel::Exact : LinearKernel::Lt;
    case LinearSite::GroupedWoA:
      // Above fast_gemv's tokens the fast tier takes the one-launch strided-batch plan (fast_gemv's
      // token slices would stream the 64 MiB weight once per 32 tokens).
      if (fast) return tokens <= kFastGemvMaxTokens ? LinearKernel::FastGemv : LinearKernel::Lt;
      return exact_range ? LinearKernel::Exact : LinearKernel::Lt;
    case LinearSite::CompressorF32:
    case LinearSite::WeightsProj:
      if (!exact_range) return LinearKernel::Lt;
      return fast ? LinearKernel::FastGemv : LinearKernel::Exact;
    case LinearSite::Dense:
      return fast ? LinearKernel::FastGemv : LinearKernel::Exact;
    case LinearSite::Head:
      if (fast) return tokens <= kHeadTmaMaxRows ? LinearKernel::GemmTma : LinearKernel::Lt;
      return exact_range ? LinearKernel::Exact : LinearKernel::Warp;
    case LinearSite::Router:
      return fast && tokens >= kRouterLtMinTokens ? LinearKernel::Lt : LinearKernel::Exact;
  }
  fail("linear_kernel: unknown site");
}

void run_linear_kernel(const DeviceContext& ctx, LinearKernel k, const ExactLinearParams& e) {
  switch (k) {
    case LinearKernel::Exact:
      return exact_linear(ctx, e);
    case LinearKernel::FastGemv:
      // cuda::linear's fast-tier branch: fast_gemv where fast_gemv_supports(e), grouped calls in token
      // slices, exact_linear otherwise.
      if (ctx.kernels() != KernelTier::Fast) fail("run_linear_kernel: fast_gemv chosen in the exact tier");
      return linear(ctx, e);
    case LinearKernel::Lt:
    case LinearKernel::Warp:
    case LinearKernel::GemmTma:
      break;
  }
  fail("run_linear_kernel: a cuBLASLt, warp-kernel or gemm_tma choice takes its own parameters, not ExactLinearParams");
}

bool run_shared_input(const DeviceContext& ctx, LinearKernel k, const ExactLinearParams* calls, int n) {
  if (k != LinearKernel::FastGemv) return false;
  return linear_shared_input(ctx, calls, n);
}

RoutedKernel routed_kernel(int64_t tokens, bool grouped_prefill, KernelTier tier, int64_t tiles_from) {
  if (tokens > kExactLinearMaxTokens) return grouped_prefill ? RoutedKernel::Grouped : RoutedKernel::PerSelection;
  const bool fast = tier == KernelTier::Fast;
  if (tokens < tiles_from) return fast ? RoutedKernel::DecodeSelections : RoutedKernel::PerSelection;
  return fast ? RoutedKernel::DecodeMma : RoutedKernel::Tiles;
}

RoutedKernel stacked_routed_kernel(int64_t tokens, KernelTier tier) {
  if (!stacked_fast_layout(tier)) return RoutedKernel::PerSelection;
  return tokens < kMoeExpertTileMinTokens ? RoutedKernel::DecodeSelections : RoutedKernel::DecodeMma;
}

bool stacked_fast_layout(KernelTier tier) { return tier == KernelTier::Fast; }

}  // namespace dsv4::cuda
