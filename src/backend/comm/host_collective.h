// The host communicators' one algorithm (communicator.h), written once and shared by the in-process
// and the TCP transports: every rank posts a Contribution (which collective, its sizes, its bytes, or
// a local error), the transport brings all N contributions together, and collective_output() computes
// a rank's result from them — a pure function of the contributions, so the result is the same on
// every transport and every run. The transport only moves bytes; HostCommunicator turns the
// interface's calls into contributions and checks the result's size against the caller's buffer.
#pragma once
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "backend/comm/communicator.h"

namespace dsv4::comm {

enum class Op : uint8_t { Barrier = 1, AllToAllV, AllGather, ReduceScatterSum, AllReduceSum };
const char* op_name(Op op);  // "all_to_all_v", ...

struct Contribution {
  Op op = Op::Barrier;
  // AllToAllV: send_bytes[N] then recv_bytes[N]; AllGather: {send bytes, recv bytes};
  // ReduceScatterSum: {send floats, recv floats}; AllReduceSum: {send floats, recv floats}; Barrier: {}.
  std::vector<uint64_t> sizes;
  std::span<const std::byte> data;  // the send buffer (a view: the caller keeps it alive)
  std::string error;                // a local argument error, reported on every rank
};

// Rank r's result bytes given every rank's contribution (all[q] from rank q). Throws dsv4::Error with
// one line naming the first inconsistency (different collectives, sizes that disagree, a local
// error), identically for every r.
std::vector<std::byte> collective_output(std::span<const Contribution> all, int r);

// Serialization of a contribution for a byte-stream transport: op, error, sizes, then data.
std::vector<std::byte> encode(const Contribution& c);
// The decoded contribution's data view points into `bytes`. Throws on a truncated message.
Contribution decode(std::span<const std::byte> bytes);

// A communicator whose ranks exchange contributions through exchange().
class HostCommunicator : public Communicator {
 public:
  MemorySpace memory() const override { return MemorySpace::Host; }
  void all_to_all_v(std::span<const std::byte> send, std::span<const size_t> send_bytes, std::span<std::byte> recv,
                    std::span<const size_t> recv_bytes) override;
  void all_gather(std::span<const std::byte> send, std::span<std::byte> recv) override;
  void reduce_scatter_sum(std::span<const float> send, std::span<float> recv) override;
  void all_reduce_sum(std::span<const float> send, std::span<float> recv) override;
  void barrier() override;

 protected:
  // Posts this rank's contribution, waits for all of them, returns collective_output(all, rank()).
  // Throws on inconsistency (on every rank) and on a peer that did not arrive in time.
  virtual std::vector<std::byte> exchange(const Contribution& mine) = 0;

 private:
  void run(const Contribution& mine, std::span<std::byte> recv);
};

}  // namespace dsv4::comm
