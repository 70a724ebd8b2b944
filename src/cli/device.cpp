#include "cli/device.h"

#include <CLI/CLI.hpp>

#include <algorithm>
#include <cstdio>
#include <cstdlib>

#include "cli/flags.h"
#include "core/error.h"
#include "runtime/rank_group.h"

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

void add_ranks_option(CLI::App& c, RankFlags& ranks) {
  ranks = {};
  c.add_option("--ranks", ranks.ranks,
               "Expert parallelism over N in-process ranks, each holding 1/N of the routed experts (same output; "
               "on cuda they share one GPU)")
      ->capture_default_str();
  c.add_option("--gpus", ranks.gpus,
               "cuda: expert parallelism over N GPUs, rank r on GPU r (routed experts split, the rest replicated)")
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

RankSpec rank_spec(const RankFlags& f, bool cuda, bool data_parallel) {
  const char* world = std::getenv("WORLD_SIZE");
  const bool tcp = world && *world && std::string(world) != "1";
  if (f.ranks < 1) fail("--ranks: expected a positive number of ranks, got ", f.ranks);
  if (f.gpus < 1) fail("--gpus: expected a positive number of GPUs, got ", f.gpus);
  if (f.gpus > 1 && !cuda) fail("--gpus ", f.gpus, ": needs --device cuda (on the CPU, --ranks N runs the same split)");
  if (f.gpus > 1 && f.ranks > 1) fail("--gpus ", f.gpus, " with --ranks ", f.ranks, ": one or the other");
  if (f.gpus > 1 && f.gpus > Runner::cuda_devices())
    fail("--gpus ", f.gpus, ": this machine has ", Runner::cuda_devices(), " GPU(s)");
  if (tcp && f.count() > 1)
    fail(f.gpus > 1 ? "--gpus " : "--ranks ", f.count(), " with WORLD_SIZE=", world,
         ": one or the other (a TCP group is one rank per process)");
  if (tcp) return {.tcp = comm::rendezvous_from_env()};
  return {.ranks = f.count(), .data_parallel = data_parallel, .gpu_per_rank = f.gpus > 1};
}

int64_t default_call_tokens(bool cuda, const std::string& kernels) {
  return cuda && parse_kernel_tier(kernels) == KernelTier::Exact ? kExactTierCallTokens : kDefaultCallTokens;
}

std::unique_ptr<Runner> load_runner(const std::string& dir, const RunnerRequest& r, const LoadProgress& progress) {
  const RankSpec ranks = rank_spec(r.ranks, r.cuda, r.data_parallel);
  BackendOptions o;
  o.numerics = parse_numerics(r.numerics);
  const int per_rank = ranks.data_parallel ? (std::max(1, r.max_seqs) + ranks.ranks - 1) / ranks.ranks : r.max_seqs;
  const int64_t asked = r.chunk > 0 ? r.chunk : default_call_tokens(r.cuda, r.kernels);
  const int64_t seqs = std::max(1, per_rank), chunk = std::max<int64_t>({asked, seqs, 1});
  if (!r.cuda) {
    // The CPU grows its state as needed: the context is the model's.
    o.capacity = {.max_seqs = seqs, .max_ctx = int64_t(1) << 40, .max_tokens = chunk};
    return load_ranked(dir, o, ranks, progress);
  }
  if (o.numerics != Numerics::Official) fail("--device cuda runs official numerics only (use --device cpu)");
  o.device = Device::Cuda;
  o.kernels = parse_kernel_tier(r.kernels);
  const int64_t ctx =
      r.max_ctx > 0 ? r.max_ctx : std::min<int64_t>(load_config(dir).max_position_embeddings, kCudaDefaultContext);
  o.capacity = {.max_seqs = seqs, .max_ctx = ctx, .max_tokens = chunk};
  if (!r.quiet) o.report = [](const std::string& line) { std::fprintf(stderr, "dsv4: %s\n", line.c_str()); };
  if (ranks.tcp) o.gpu = ranks.tcp->local_rank;  // one process per GPU
  return load_ranked(dir, o, ranks, progress);
}

}  // namespace dsv4::cli
