#include "cli/device.h"

#include <CLI/CLI.hpp>

#include <algorithm>

#include "core/error.h"
#include "model/model.h"

#if DSV4_HAVE_CUDA
#include "backend/cuda/context.h"
#include "model_cuda/cuda_model.h"
#include "model_cuda/cuda_step_model.h"
#endif

namespace dsv4::cli {

void add_device_option(CLI::App& c, std::string& device, std::string& kernels) {
  device = "auto";
  c.add_option("--device", device, "cpu | cuda | auto (cuda when built with CUDA and a Hopper GPU is present)")
      ->check(CLI::IsMember({"auto", "cpu", "cuda"}))
      ->capture_default_str();
  kernels = "fast";
  c.add_option("--kernels", kernels, "cuda: fast (tensor cores, free summation order) | exact (bit-identical to the CPU)")
      ->check(CLI::IsMember({"fast", "exact"}))
      ->capture_default_str();
}

bool cuda_available() {
#if DSV4_HAVE_CUDA
  return cuda::have_hopper_device();
#else
  return false;
#endif
}

bool use_cuda(const std::string& device, const char* command, bool supported) {
  if (device == "cpu") return false;
  if (device == "auto") return supported && cuda_available();
#if !DSV4_HAVE_CUDA
  fail("--device cuda: this dsv4 was built without CUDA");
#endif
  if (!supported) fail("dsv4 ", command, ": not yet on cuda (use --device cpu)");
  if (!cuda_available()) fail("--device cuda: no Hopper (sm_90) GPU found");
  return true;
}

#if DSV4_HAVE_CUDA
namespace {
cuda::KernelTier kernel_tier(const std::string& kernels) {
  if (kernels != "fast" && kernels != "exact") fail("--kernels: expected fast or exact, got '", kernels, "'");
  return kernels == "fast" ? cuda::KernelTier::Fast : cuda::KernelTier::Exact;
}

}  // namespace
#endif

std::unique_ptr<StepModel> load_step_model(const std::string& dir, bool cuda, const std::string& numerics,
                                           int max_seqs, int64_t max_ctx, int64_t chunk,
                                           const LoadProgress& progress, const std::string& kernels) {
  if (!cuda) return std::make_unique<CpuStepModel>(Model::load(dir, parse_numerics(numerics), progress), max_seqs);
  if (numerics != "official") fail("--device cuda runs official numerics only (use --device cpu)");
#if DSV4_HAVE_CUDA
  if (max_ctx <= 0)
    max_ctx = std::min<int64_t>(load_config(dir).max_position_embeddings, kCudaDefaultContext);
  return cuda::CudaStepModel::load(dir, max_seqs, max_ctx, chunk, progress, kernel_tier(kernels));
#else
  (void)max_seqs, (void)max_ctx, (void)chunk, (void)kernels;
  fail("--device cuda: this dsv4 was built without CUDA");
#endif
}

#if DSV4_HAVE_CUDA
struct CudaSequence::Impl {
  std::unique_ptr<cuda::CudaModel> model;
};

CudaSequence::CudaSequence(const std::string& dir, int64_t max_ctx, int64_t chunk, const LoadProgress& progress,
                           const std::string& kernels)
    : impl_(std::make_unique<Impl>()) {
  cuda::CudaModelOptions o;
  o.max_seqs = 1;
  o.max_ctx = std::max<int64_t>(max_ctx, 1);
  o.max_tokens = std::max<int64_t>(chunk, 1);
  o.kernels = kernel_tier(kernels);
  impl_->model = cuda::CudaModel::load(dir, o, progress);
}

CudaSequence::~CudaSequence() = default;

const ModelConfig& CudaSequence::config() const { return impl_->model->config(); }

Tensor CudaSequence::feed(const std::vector<int32_t>& tokens, bool all) {
  cuda::CudaModel& m = *impl_->model;
  const int64_t T = int64_t(tokens.size()), V = m.config().vocab_size, chunk = m.options().max_tokens;
  if (T == 0) fail("forward: empty chunk");
  if (pos_ + T > m.options().max_ctx)
    fail("the sequence would reach ", pos_ + T, " positions; this CUDA model holds ", m.options().max_ctx);
  Tensor out({all ? T : 1, V});
  for (int64_t t0 = 0; t0 < T; t0 += chunk) {
    const std::vector<int32_t> part(tokens.begin() + t0, tokens.begin() + std::min(T, t0 + chunk));
    const int64_t n = int64_t(part.size());
    const bool last = t0 + n == T;
    Tensor l = n == 1 ? m.decode_step(part, {0}, {int32_t(pos_)}) : m.forward(0, pos_, part, all);
    if (all)
      std::copy(l.data.begin(), l.data.end(), out.row(t0));
    else if (last)
      std::copy(l.data.end() - V, l.data.end(), out.row(0));
    pos_ += n;
  }
  return out;
}
#else
struct CudaSequence::Impl {};
CudaSequence::CudaSequence(const std::string&, int64_t, int64_t, const LoadProgress&, const std::string&) {
  fail("--device cuda: this dsv4 was built without CUDA");
}
CudaSequence::~CudaSequence() = default;
const ModelConfig& CudaSequence::config() const { fail("no CUDA"); }
Tensor CudaSequence::feed(const std::vector<int32_t>&, bool) { fail("no CUDA"); }
#endif

}  // namespace dsv4::cli
