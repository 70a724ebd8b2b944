#include "cli/device.h"

#include <CLI/CLI.hpp>

#include <algorithm>

#include "cli/flags.h"
#include "core/error.h"

namespace dsv4::cli {

void add_device_option(CLI::App& c, std::string& device, std::string& kernels) {
  device = "auto";
  c.add_option("--device", device, "cpu | cuda | auto (cuda when built with CUDA and a Hopper GPU is present)")
      ->check(one_of({"auto", "cpu", "cuda"}))
      ->capture_default_str();
  kernels = "fast";
  c.add_option("--kernels", kernels, "cuda: fast (tensor cores, free summation order) | exact (bit-identical to the CPU)")
      ->check(one_of({"fast", "exact"}))
      ->capture_default_str();
}

bool cuda_available() { return Runner::cuda_available(); }

bool use_cuda(const std::string& device, const char* command, bool supported) {
  if (device == "cpu") return false;
  if (device == "auto") return supported && cuda_available();
  require_cuda(command);
  if (!supported) fail("dsv4 ", command, ": not yet on cuda (use --device cpu)");
  return true;
}

void require_cuda(const char* command) {
#if !DSV4_HAVE_CUDA
  fail("dsv4 ", command, ": this dsv4 was built without CUDA");
#endif
  if (!cuda_available()) fail("dsv4 ", command, ": no Hopper (sm_90) GPU found");
}

std::unique_ptr<Runner> load_runner(const std::string& dir, const RunnerRequest& r, const LoadProgress& progress) {
  BackendOptions o;
  o.numerics = parse_numerics(r.numerics);
  const int64_t seqs = std::max(1, r.max_seqs), chunk = std::max<int64_t>({r.chunk, seqs, 1});
  if (!r.cuda) {
    // The CPU grows its state as needed: the context is the model's.
    o.capacity = {.max_seqs = seqs, .max_ctx = int64_t(1) << 40, .max_tokens = chunk};
    return Runner::load(dir, o, progress);
  }
  if (o.numerics != Numerics::Official) fail("--device cuda runs official numerics only (use --device cpu)");
  o.device = Device::Cuda;
  o.kernels = parse_kernel_tier(r.kernels);
  const int64_t ctx =
      r.max_ctx > 0 ? r.max_ctx : std::min<int64_t>(load_config(dir).max_position_embeddings, kCudaDefaultContext);
  o.capacity = {.max_seqs = seqs, .max_ctx = ctx, .max_tokens = chunk};
  return Runner::load(dir, o, progress);
}

}  // namespace dsv4::cli
