// How far the exact kernel tier reaches on cuda: a Model call of up to this many tokens runs kernels whose
// sums are the CPU's, bit for bit (exact_linear, the per-selection routed experts, the exact attention);
// larger calls take tensor-core kernels in both tiers. The backend chooses its kernels by it
// (backend/cuda/linear_exact.h kExactLinearMaxTokens); the commands cut prefill by it in the exact tier
// (runtime/engine.h kExactTierCallTokens, cli/device.h default_call_tokens).
#pragma once
#include <cstdint>

namespace dsv4 {

inline constexpr int64_t kExactTierMaxCallTokens = 512;

}  // namespace dsv4
