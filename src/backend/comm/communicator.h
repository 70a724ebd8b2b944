// Communicator: the collectives expert parallelism needs (token dispatch to the experts' ranks and the
// weighted combine back, issue 16), behind one interface with three implementations:
//   - in-process (inprocess_comm.h): N ranks as threads of one process, shared memory — CI runs the
//     multi-rank decomposition on the CPU with it;
//   - TCP (tcp_comm.h): one process per rank over a torchrun-like rendezvous (MASTER_ADDR, MASTER_PORT,
//     RANK, WORLD_SIZE), host buffers; docs/multi-gpu.md;
//   - NCCL (nccl_comm.h, CUDA build with NCCL only): device buffers, one stream.
//
// Every collective is called by every rank of the group, in the same order, with consistent sizes.
// Buffers live in memory(): host memory for the in-process and TCP communicators, device memory for
// NCCL. Data are in rank order: "per peer" arrays have size() entries, entry p for rank p.
//
// Contracts, for a group of N ranks, this rank r:
//   all_to_all_v  send = [block for rank 0 | block for rank 1 | ...], send_bytes[p] bytes each (0 allowed);
//                 recv = [block from rank 0 | block from rank 1 | ...], recv_bytes[p] bytes each, which must
//                 equal what rank p sends to r. send and recv must not overlap.
//   all_gather    recv [N * send.size()] = the send buffers of ranks 0..N-1, concatenated.
//   reduce_scatter_sum  send [N * c] fp32 on every rank; recv [c] = sum over ranks q of send_q[r*c, (r+1)*c).
//   all_reduce_sum      recv [c] = sum over ranks q of send_q [c] (send == recv allowed).
//   barrier       returns once every rank entered it.
// Sums are fp32 in rank order, ((x_0 + x_1) + x_2) + ..., so every rank gets the same bits and the
// result does not depend on thread or network timing (the host communicators; NCCL's order is its own).
//
// Errors: the host communicators check sizes across ranks (mismatched counts or lengths, ranks calling
// different collectives) and throw dsv4::Error with one line naming the rank and what disagreed, on
// every rank; a peer that does not arrive within the group's timeout gives an error instead of a hang.
#pragma once
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "core/error.h"

namespace dsv4::comm {

enum class MemorySpace : uint8_t { Host, Device };

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual MemorySpace memory() const = 0;

  virtual void all_to_all_v(std::span<const std::byte> send, std::span<const size_t> send_bytes,
                            std::span<std::byte> recv, std::span<const size_t> recv_bytes) = 0;
  virtual void all_gather(std::span<const std::byte> send, std::span<std::byte> recv) = 0;
  virtual void reduce_scatter_sum(std::span<const float> send, std::span<float> recv) = 0;
  virtual void all_reduce_sum(std::span<const float> send, std::span<float> recv) = 0;
  virtual void barrier() = 0;
};

// Typed forms: counts in elements of T (trivially copyable), converted to bytes.
template <typename T>
void all_to_all_v(Communicator& c, std::span<const T> send, std::span<const size_t> send_counts, std::span<T> recv,
                  std::span<const size_t> recv_counts) {
  std::vector<size_t> sb(send_counts.begin(), send_counts.end()), rb(recv_counts.begin(), recv_counts.end());
  for (size_t& n : sb) n *= sizeof(T);
  for (size_t& n : rb) n *= sizeof(T);
  c.all_to_all_v(std::as_bytes(send), sb, std::as_writable_bytes(recv), rb);
}

template <typename T>
void all_gather(Communicator& c, std::span<const T> send, std::span<T> recv) {
  c.all_gather(std::as_bytes(send), std::as_writable_bytes(recv));
}

}  // namespace dsv4::comm
