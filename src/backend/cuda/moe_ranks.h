// The MoE of one rank of an expert-parallel group on the GPU (issue 16, docs/multi-gpu.md): the router
// and the shared expert run here on this rank's tokens; the routed experts are split over the ranks
// (rank r holds [r * E/N, (r+1) * E/N), backend/comm/expert_range.h). Per MoE layer:
//   1. the picks of this rank's T tokens come to the host; each (token, pick) entry goes to its expert's
//      rank, entries in token then pick order (the counts through an all_gather);
//   2. all_to_all_v of the entries' x rows (bf16) and of (held expert, weight) per entry;
//   3. this rank's experts over what arrived (moe_routed_entries: one row per entry, pieces of at most
//      the layer workspace's T*k rows);
//   4. all_to_all_v of the outputs back to the tokens' ranks;
//   5. moe_combine adds each token's picks in ascending expert id (ties: pick order) and the shared
//      expert, as one rank does, so the exact tier gives one rank's bits on every rank count.
// A rank with no tokens (T = 0) still takes part: it serves the others' entries.
//
// The exchange's communicator: given a host communicator (the in-process group, the TCP rendezvous)
// whose ranks each have a GPU of their own, and an NCCL build, the ranks bootstrap NCCL through it and
// the rows move GPU to GPU on this rank's stream; ranks that share a GPU (NCCL refuses them: `--ranks N`
// on cuda, the tests on one H200) stage the rows through the host. A device communicator given as is
// (NCCL) is used directly. The counts go through the host, so a call synchronizes the stream once per
// layer and cannot be captured in a CUDA graph (the backend runs expert-parallel calls as plain launches).
#pragma once
#include <cuda_bf16.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "backend/comm/communicator.h"
#include "backend/cuda/buffer.h"
#include "backend/cuda/context.h"
#include "backend/cuda/moe_sublayer.h"

namespace dsv4::cuda {

class MoeRanks {
 public:
  // `max_tokens`: the most tokens of one call on any rank (every rank of a group has the same capacity).
  MoeRanks(const DeviceContext& ctx, const ModelConfig& cfg, comm::Communicator& c, int64_t max_tokens,
           bool grouped_prefill);
  ~MoeRanks();
  MoeRanks(const MoeRanks&) = delete;
  MoeRanks& operator=(const MoeRanks&) = delete;

  // y [T, D] = what moe_experts gives for x [T, D] with ws.ids / ws.weights (moe_route of x on ws),
  // the routed experts spread over the group. Every rank calls it for each MoE layer in the same order.
  void experts(const DevMoeWeights& w, MoeWorkspace& ws, const bf16* x, int64_t T, bf16* y);

 private:
  // all_to_all_v of device buffers (bytes per peer), staged through the host for host communicators.
  void exchange_device(const std::byte* send, std::span<const size_t> send_bytes, std::byte* recv,
                       std::span<const size_t> recv_bytes);
  // The same of host buffers, staged through the device for device communicators.
  void exchange_host(const std::byte* send, std::span<const size_t> send_bytes, std::byte* recv,
                     std::span<const size_t> recv_bytes);
  std::vector<size_t> gather_counts(const std::vector<size_t>& send_n);  // [N * N]: rank p's counts at p * N

  const DeviceContext& ctx_;
  std::unique_ptr<comm::Communicator> nccl_;  // bootstrapped from the given one (one GPU per rank)
  comm::Communicator& comm_;                  // the exchange's: *nccl_ or the given one
  int N_ = 1;
  int64_t E_ = 0, k_ = 0, D_ = 0, per_ = 0, max_entries_ = 0, max_in_ = 0;
  MoeWorkspace entries_ws_;             // MoeShape{D, I, E/N, 1}: the routed pass over received entries
  DeviceBuffer<int32_t> order_;         // [T*k] entry index (t * k + j) of each sent row, by rank
  DeviceBuffer<int32_t> entry_row_;     // [T*k] the returned row of entry t * k + j
  DeviceBuffer<bf16> send_x_, back_;    // [T*k, D] rows sent / their outputs returned
  DeviceBuffer<bf16> recv_x_, out_;     // [N*T*min(k, E/N), D] rows received / this rank's outputs
  int32_t* ids_h_ = nullptr;            // pinned [T*k] picks of this rank's tokens
  float* weights_h_ = nullptr;          // pinned [T*k]
  std::vector<std::byte> stage_a_, stage_b_;  // host staging of a host communicator's exchange
  DeviceBuffer<std::byte> dev_a_, dev_b_;     // device staging of a device communicator's host data
};

}  // namespace dsv4::cuda
