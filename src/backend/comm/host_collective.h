// The host communicators' one algorithm (communicator.h), written once and shared by the in-process
// and the TCP transports: every rank posts a Contribution (which collective, its sizes, its bytes, or
// a local error), the transport brings all N contributions together, and collective_output() computes
// a rank's result from them — a pure function of the contributions, so the result is the same on
// every transport and every run. The transport only moves bytes; HostCommunicator turns the
// interface's calls into contributions and checks the result's size against the caller's buffer.
//
// Waits: every collective of the interface waits at most the group's timeout for the peers (a rank
// that stops answering gives a one-line error naming the collective and the rank(s) missing). One
// that waits for another rank's next step rather than for a peer inside a step -- the other ranks of
// a rank group waiting for rank 0's next Model call, which a chat's user may hold for hours -- is an
// all_gather with Wait::Unbounded.
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

// How long this rank waits for its peers at one collective.
enum class Wait : uint8_t {
  Bounded,    // at most the group's timeout, then a one-line dsv4::Error; the group is unusable after it
  Unbounded,  // no time limit while the group holds; a peer that leaves (its connection closes: its
              // process exited) or a group broken by another rank's timeout still ends it with one line
};

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
  // all_gather waiting for the peers as `wait` says (the interface's all_gather: Wait::Bounded).
  void all_gather(std::span<const std::byte> send, std::span<std::byte> recv, Wait wait);

 protected:
  // Posts this rank's contribution, waits for all of them (as `wait` says), returns
  // collective_output(all, rank()). Throws on inconsistency (on every rank) and on a peer that did not
  // arrive in time or left.
  virtual std::vector<std::byte> exchange(const Contribution& mine, Wait wait) = 0;

 private:
  void run(const Contribution& mine, std::span<std::byte> recv, Wait wait);
};

// The typed form (communicator.h's all_gather<T>) with a Wait.
template <typename T>
void all_gather(HostCommunicator& c, std::span<const T> send, std::span<T> recv, Wait wait) {
  c.all_gather(std::as_bytes(send), std::as_writable_bytes(recv), wait);
}

}  // namespace dsv4::comm
