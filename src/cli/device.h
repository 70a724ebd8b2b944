// --device cpu|cuda on the computing commands, and the Runner (runtime/runner.h) behind them.
// Default ("auto"): cuda when this is a CUDA build and a Hopper GPU is present, else cpu. Commands whose
// CUDA path does not exist yet refuse "cuda" with a one-line error.
#pragma once
#include <cstdint>
#include <memory>
#include <string>

#include "runtime/engine.h"
#include "runtime/rank_group.h"
#include "runtime/runner.h"

namespace CLI {
class App;
}

namespace dsv4::cli {

// --device (default "auto") and --kernels fast|exact (default "fast": the CUDA backend's linears,
// docs/cuda.md "Kernel tiers"; exact is bit-identical to the CPU; the CPU has one tier and ignores it).
void add_device_option(CLI::App& c, std::string& device, std::string& kernels);
// Expert-parallel ranks (runtime/rank_group.h, docs/multi-gpu.md): --ranks N in-process ranks (cpu; on
// cuda they share the one GPU, a test of the decomposition), --gpus N one rank per GPU (cuda).
struct RankFlags {
  int ranks = 1;
  int gpus = 1;
  int count() const { return ranks > gpus ? ranks : gpus; }
};
void add_ranks_option(CLI::App& c, RankFlags& ranks);
// The group the flags and the environment ask for (runtime/rank_group.h): a TCP group when WORLD_SIZE is
// set to more than 1 (then neither flag may ask for ranks). One-line errors for flags that cannot be.
RankSpec rank_spec(const RankFlags& f, bool cuda, bool data_parallel);
// True when `command` runs on the GPU. `supported`: whether that command has a CUDA path.
bool use_cuda(const std::string& device, const char* command, bool supported = true);
bool cuda_available();  // CUDA build and a Hopper device (Runner::cuda_available)
// The one error of every command that needs the GPU: "dsv4 COMMAND: this dsv4 was built without CUDA"
// or "dsv4 COMMAND: no Hopper (sm_90) GPU found".
void require_cuda(const char* command);

// Positions per sequence on cuda when the command does not say (the model's context capped here: the
// GPU state is allocated for the whole context of every slot).
constexpr int64_t kCudaDefaultContext = 4096;

// Tokens per Model call when a command does not say (RunnerRequest::chunk 0): the engine's prefill chunk
// (runtime/engine.h kDefaultPrefillChunk, 2,048), except in the exact tier on cuda: the most whose
// kernels are bit-identical to the CPU (runtime/engine.h kExactTierCallTokens, 512).
constexpr int64_t kDefaultCallTokens = kDefaultPrefillChunk;
int64_t default_call_tokens(bool cuda, const std::string& kernels);

// What a command asks of the runner: the device and numerics flags, and the backend's capacity.
struct RunnerRequest {
  bool cuda = false;
  std::string numerics = "official";  // cuda: official only
  std::string kernels = "fast";       // cuda: fast | exact
  int max_seqs = 1;                   // slots
  int64_t max_ctx = 0;                // cuda: positions per slot (0: the model's, capped at kCudaDefaultContext);
                                      // cpu: the model's
  int64_t chunk = 0;                  // tokens per Model call (a prefill piece; at least max_seqs is taken;
                                      // 0: default_call_tokens)
  RankFlags ranks;                    // --ranks / --gpus: in-process expert-parallel ranks
  bool data_parallel = false;         // ranks > 1: each rank its own sequences, max_seqs / ranks slots each
                                      // (rounded up; the engine: serve --ranks)
  bool quiet = false;                 // cuda: no memory plan line on stderr before the load
};

// The runner of the model in `dir` for `r`, weights loaded with `progress`. With r.ranks > 1, or when
// the environment makes this process a rank of a TCP group (WORLD_SIZE > 1: MASTER_ADDR, MASTER_PORT,
// RANK; docs/multi-gpu.md), the runner of rank 0 of the group; on another rank of a TCP group it makes
// rank 0's calls and returns nullptr once rank 0 is done (the command then exits 0 without output).
std::unique_ptr<Runner> load_runner(const std::string& dir, const RunnerRequest& r, const LoadProgress& progress);

}  // namespace dsv4::cli
