// The expert-parallel MoE on the GPU (contract in moe_ranks.h).
#include "backend/cuda/moe_ranks.h"

#include <algorithm>
#include <cstring>

#include "backend/comm/expert_range.h"
#include "backend/cuda/check.h"
#include "backend/cuda/moe_ops.h"
#include "core/error.h"
#if DSV4_HAVE_NCCL
#include "backend/comm/nccl_comm.h"
#endif

namespace dsv4::cuda {
namespace {

// NCCL over the given host group when every rank has a GPU of its own (their UUIDs differ) and this is
// an NCCL build; null otherwise. Every rank reaches the same answer (it is a function of the gathered
// UUIDs), so either all bootstrap NCCL or none does.
std::unique_ptr<comm::Communicator> nccl_over(const DeviceContext& ctx, comm::Communicator& c) {
  if (c.memory() != comm::MemorySpace::Host || c.size() < 2) return nullptr;
  cudaDeviceProp prop{};
  DSV4_CUDA_CHECK(cudaGetDeviceProperties(&prop, ctx.device()));
  std::vector<std::byte> all(sizeof prop.uuid * size_t(c.size()));
  c.all_gather(std::as_bytes(std::span(&prop.uuid, 1)), all);
  for (int p = 0; p < c.size(); ++p)
    for (int q = 0; q < p; ++q)
      if (std::memcmp(&all[size_t(p) * sizeof prop.uuid], &all[size_t(q) * sizeof prop.uuid], sizeof prop.uuid) == 0)
        return nullptr;  // ranks p and q share a GPU
#if DSV4_HAVE_NCCL
  return comm::connect_nccl(c, {.device = ctx.device(), .stream = ctx.stream()});
#else
  return nullptr;
#endif
}

}  // namespace

MoeRanks::MoeRanks(const DeviceContext& ctx, const ModelConfig& cfg, comm::Communicator& c, int64_t max_tokens,
                   bool grouped_prefill)
    : ctx_(ctx), nccl_(nccl_over(ctx, c)), comm_(nccl_ ? *nccl_ : c), N_(c.size()), E_(cfg.n_routed_experts),
      k_(cfg.experts_per_tok), D_(cfg.hidden_size),
      per_(expert_range(cfg.n_routed_experts, &c).count(cfg.n_routed_experts)),
      max_entries_(max_tokens * cfg.experts_per_tok),
      max_in_(int64_t(c.size()) * max_tokens * std::min<int64_t>(cfg.experts_per_tok, per_)),
      entries_ws_(ctx, {.D = cfg.hidden_size, .I = cfg.moe_inter_dim, .E = per_, .k = 1}, max_entries_) {
  entries_ws_.grouped_prefill = grouped_prefill;
  order_ = DeviceBuffer<int32_t>(size_t(max_entries_));
  entry_row_ = DeviceBuffer<int32_t>(size_t(max_entries_));
  send_x_ = DeviceBuffer<bf16>(size_t(max_entries_ * D_));
  back_ = DeviceBuffer<bf16>(size_t(max_entries_ * D_));
  recv_x_ = DeviceBuffer<bf16>(size_t(max_in_ * D_));
  out_ = DeviceBuffer<bf16>(size_t(max_in_ * D_));
  DSV4_CUDA_CHECK(cudaMallocHost(reinterpret_cast<void**>(&ids_h_), size_t(max_entries_) * sizeof(int32_t)));
  DSV4_CUDA_CHECK(cudaMallocHost(reinterpret_cast<void**>(&weights_h_), size_t(max_entries_) * sizeof(float)));
}

MoeRanks::~MoeRanks() {
  if (ids_h_) cudaFreeHost(ids_h_);
  if (weights_h_) cudaFreeHost(weights_h_);
}

namespace {

size_t total(std::span<const size_t> n) {
  size_t s = 0;
  for (size_t v : n) s += v;
  return s;
}

}  // namespace

void MoeRanks::exchange_device(const std::byte* send, std::span<const size_t> send_bytes, std::byte* recv,
                               std::span<const size_t> recv_bytes) {
  const size_t out = total(send_bytes), in = total(recv_bytes);
  if (comm_.memory() == comm::MemorySpace::Device) {
    // NCCL bootstrapped here enqueues on this rank's stream, in order with the kernels; a device
    // communicator given as is may have a stream of its own.
    if (!nccl_) ctx_.synchronize();
    comm_.all_to_all_v({send, out}, send_bytes, {recv, in}, recv_bytes);
    if (!nccl_) DSV4_CUDA_CHECK(cudaDeviceSynchronize());
    return;
  }
  stage_a_.resize(out);
  stage_b_.resize(in);
  if (out) DSV4_CUDA_CHECK(cudaMemcpyAsync(stage_a_.data(), send, out, cudaMemcpyDeviceToHost, ctx_.stream()));
  ctx_.synchronize();
  comm_.all_to_all_v(stage_a_, send_bytes, stage_b_, recv_bytes);
  if (in) DSV4_CUDA_CHECK(cudaMemcpyAsync(recv, stage_b_.data(), in, cudaMemcpyHostToDevice, ctx_.stream()));
  ctx_.synchronize();  // stage_b_ is reused by the next exchange
}

void MoeRanks::exchange_host(const std::byte* send, std::span<const size_t> send_bytes, std::byte* recv,
                             std::span<const size_t> recv_bytes) {
  const size_t out = total(send_bytes), in = total(recv_bytes);
  if (comm_.memory() == comm::MemorySpace::Host) {
    comm_.all_to_all_v({send, out}, send_bytes, {recv, in}, recv_bytes);
    return;
  }
  if (dev_a_.size() < std::max<size_t>(out, 1)) dev_a_ = DeviceBuffer<std::byte>(std::max<size_t>(out, 1));
  if (dev_b_.size() < std::max<size_t>(in, 1)) dev_b_ = DeviceBuffer<std::byte>(std::max<size_t>(in, 1));
  if (out) DSV4_CUDA_CHECK(cudaMemcpyAsync(dev_a_.get(), send, out, cudaMemcpyHostToDevice, ctx_.stream()));
  exchange_device(dev_a_.get(), send_bytes, dev_b_.get(), recv_bytes);
  if (in) DSV4_CUDA_CHECK(cudaMemcpyAsync(recv, dev_b_.get(), in, cudaMemcpyDeviceToHost, ctx_.stream()));
  ctx_.synchronize();
}

std::vector<size_t> MoeRanks::gather_counts(const std::vector<size_t>& send_n) {
  std::vector<size_t> all(size_t(N_) * size_t(N_));
  if (comm_.memory() == comm::MemorySpace::Host) {
    comm::all_gather<size_t>(comm_, send_n, all);
    return all;
  }
  const size_t mine = send_n.size() * sizeof(size_t);
  if (dev_a_.size() < mine) dev_a_ = DeviceBuffer<std::byte>(mine);
  if (dev_b_.size() < mine * size_t(N_)) dev_b_ = DeviceBuffer<std::byte>(mine * size_t(N_));
  DSV4_CUDA_CHECK(cudaMemcpyAsync(dev_a_.get(), send_n.data(), mine, cudaMemcpyHostToDevice, ctx_.stream()));
  if (!nccl_) ctx_.synchronize();  // a given device communicator may enqueue on a stream of its own
  comm_.all_gather({dev_a_.get(), mine}, {dev_b_.get(), mine * size_t(N_)});
  if (!nccl_) DSV4_CUDA_CHECK(cudaDeviceSynchronize());
  DSV4_CUDA_CHECK(cudaMemcpyAsync(all.data(), dev_b_.get(), mine * size_t(N_), cudaMemcpyDeviceToHost, ctx_.stream()));
  ctx_.synchronize();
  return all;
}

void MoeRanks::experts(const DevMoeWeights& w, MoeWorkspace& ws, const bf16* x, int64_t T, bf16* y) {
  const int64_t k = k_, Tk = T * k, D = D_;
  if (Tk > max_entries_) fail("moe ranks: ", T, " tokens, the exchange holds ", max_entries_ / k);
  if (w.E != E_ || w.k != k_ || w.D != D_ || w.held != per_ || w.first_expert != comm_.rank() * per_)
    fail("moe ranks: the layer's experts [", w.first_expert, ", ", w.first_expert + w.held,
         ") are not rank ", comm_.rank(), "'s share of ", E_);
  const int N = N_, me = comm_.rank();

  // 1. This rank's entries by destination rank, in token then pick order.
  if (Tk > 0) {
    DSV4_CUDA_CHECK(cudaMemcpyAsync(ids_h_, ws.ids.get(), size_t(Tk) * 4, cudaMemcpyDeviceToHost, ctx_.stream()));
    DSV4_CUDA_CHECK(cudaMemcpyAsync(weights_h_, ws.weights.get(), size_t(Tk) * 4, cudaMemcpyDeviceToHost, ctx_.stream()));
    ctx_.synchronize();
  }
  const ExpertDispatch plan = plan_dispatch({ids_h_, size_t(Tk)}, per_, N);
  const std::vector<size_t>& send_n = plan.send_n;
  struct Meta {
    int32_t expert;  // held expert at the destination
    float weight;
  };
  std::vector<Meta> meta(static_cast<size_t>(Tk));
  for (int64_t r = 0; r < Tk; ++r) {
    const int32_t i = plan.order[size_t(r)];
    meta[size_t(r)] = {.expert = int32_t(ids_h_[i] % per_), .weight = weights_h_[i]};
  }
  const std::vector<size_t> all_n = gather_counts(send_n);
  std::vector<size_t> recv_n(static_cast<size_t>(N));
  for (int p = 0; p < N; ++p) recv_n[size_t(p)] = all_n[size_t(p) * size_t(N) + size_t(me)];
  const int64_t n_in = int64_t(total(recv_n));
  if (n_in > max_in_) fail("moe ranks: ", n_in, " entries arrived, the exchange holds ", max_in_);

  // 2. The entries' x rows and (expert, weight).
  if (Tk > 0) {
    DSV4_CUDA_CHECK(cudaMemcpyAsync(order_.get(), plan.order.data(), size_t(Tk) * 4, cudaMemcpyHostToDevice,
                                    ctx_.stream()));
    DSV4_CUDA_CHECK(cudaMemcpyAsync(entry_row_.get(), plan.entry_row.data(), size_t(Tk) * 4, cudaMemcpyHostToDevice,
                                    ctx_.stream()));
    gather_rows(ctx_, {.src = x, .rows = order_.get(), .div = int(k), .dst = send_x_.get(), .n = Tk, .D = int(D)});
  }
  auto bytes = [](const std::vector<size_t>& n, size_t each) {
    std::vector<size_t> b(n);
    for (size_t& v : b) v *= each;
    return b;
  };
  const size_t row = size_t(D) * sizeof(bf16);
  std::vector<Meta> meta_in(static_cast<size_t>(n_in));
  exchange_host(reinterpret_cast<const std::byte*>(meta.data()), bytes(send_n, sizeof(Meta)),
                reinterpret_cast<std::byte*>(meta_in.data()), bytes(recv_n, sizeof(Meta)));
  exchange_device(reinterpret_cast<const std::byte*>(send_x_.get()), bytes(send_n, row),
                  reinterpret_cast<std::byte*>(recv_x_.get()), bytes(recv_n, row));

  // 3. This rank's experts over the arrived entries, in pieces of the entries workspace.
  const int64_t piece = entries_ws_.max_tokens();
  std::vector<int32_t> ids_in(static_cast<size_t>(piece));
  std::vector<float> w_in(static_cast<size_t>(piece));
  for (int64_t r0 = 0; r0 < n_in; r0 += piece) {
    const int64_t n = std::min(piece, n_in - r0);
    for (int64_t i = 0; i < n; ++i) {
      const Meta& m = meta_in[size_t(r0 + i)];
      if (m.expert < 0 || m.expert >= per_) fail("moe ranks: an entry names held expert ", m.expert, " of ", per_);
      ids_in[size_t(i)] = m.expert;
      w_in[size_t(i)] = m.weight;
    }
    // Pageable sources: staged before the call returns, in stream order with the kernels.
    DSV4_CUDA_CHECK(cudaMemcpyAsync(entries_ws_.ids.get(), ids_in.data(), size_t(n) * 4, cudaMemcpyHostToDevice,
                                    ctx_.stream()));
    DSV4_CUDA_CHECK(cudaMemcpyAsync(entries_ws_.weights.get(), w_in.data(), size_t(n) * 4, cudaMemcpyHostToDevice,
                                    ctx_.stream()));
    moe_routed_entries(ctx_, w, entries_ws_, recv_x_.get() + r0 * D, n, out_.get() + r0 * D);
    ctx_.synchronize();  // ids_in / w_in are refilled by the next piece
  }

  // 4. The outputs back to the tokens' ranks, 5. combined with the shared expert.
  exchange_device(reinterpret_cast<const std::byte*>(out_.get()), bytes(recv_n, row),
                  reinterpret_cast<std::byte*>(back_.get()), bytes(send_n, row));
  if (T == 0) return;
  const bf16* shared = moe_shared_expert(ctx_, w, ws, x, T);
  moe_combine(ctx_, {.y2 = back_.get(), .ids = ws.ids.get(), .entry_row = entry_row_.get(), .shared = shared, .y = y,
                     .T = T, .k = int(k), .D = int(D)});
}

}  // namespace dsv4::cuda
