#include "backend/backend.h"

#include "backend/cpu/cpu_backend.h"
#include "backend/make_backend.h"
#include "core/error.h"
#if DSV4_HAVE_CUDA
#include "backend/cuda/context.h"
#include "backend/cuda/device.h"
#include "backend/cuda/cuda_backend.h"
#endif

namespace dsv4 {

Numerics parse_numerics(const std::string& s) {
  if (s == "reference") return Numerics::Reference;
  if (s == "official") return Numerics::Official;
  fail("--numerics: expected 'reference' or 'official', got '", s, "'");
}
const char* numerics_name(Numerics n) { return n == Numerics::Reference ? "reference" : "official"; }

KernelTier parse_kernel_tier(const std::string& s) {
  if (s == "exact") return KernelTier::Exact;
  if (s == "fast") return KernelTier::Fast;
  fail("--kernels: expected 'fast' or 'exact', got '", s, "'");
}
const char* kernel_tier_name(KernelTier t) { return t == KernelTier::Exact ? "exact" : "fast"; }

std::unique_ptr<Backend> make_backend(const ModelConfig& cfg, const Weights& w, uint64_t total_bytes,
                                      const BackendOptions& o, const LoadProgress& progress) {
  if (o.capacity.max_seqs < 1 || o.capacity.max_ctx < 1 || o.capacity.max_tokens < 1)
    fail("backend: slots, context and tokens per call must be positive (got ", o.capacity.max_seqs, ", ",
         o.capacity.max_ctx, ", ", o.capacity.max_tokens, ")");
  if (o.device == Device::Cpu) return std::make_unique<cpu::CpuBackend>(cfg, w, total_bytes, o, progress);
#if DSV4_HAVE_CUDA
  if (o.numerics != Numerics::Official) fail("--device cuda runs official numerics only (use --device cpu)");
  return std::make_unique<cuda::CudaBackend>(cfg, w, total_bytes, o, progress);
#else
  fail("--device cuda: this dsv4 was built without CUDA");
#endif
}

bool cuda_available() {
#if DSV4_HAVE_CUDA
  return cuda::have_hopper_device();
#else
  return false;
#endif
}

int cuda_device_count() {
#if DSV4_HAVE_CUDA
  return cuda::device_count();
#else
  return 0;
#endif
}

}  // namespace dsv4
