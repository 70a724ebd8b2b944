#include "backend/comm/nccl_comm.h"

#include <cuda_runtime.h>
#include <nccl.h>

#include <cstring>
#include <numeric>

namespace dsv4::comm {
namespace {

void check_cuda(cudaError_t e, const char* what) {
  if (e != cudaSuccess) fail("nccl comm: ", what, " failed: ", cudaGetErrorString(e));
}

class NcclComm final : public Communicator {
 public:
  NcclComm(Communicator& bootstrap, const NcclOptions& o)
      : rank_(bootstrap.rank()), size_(bootstrap.size()), device_(o.device), stream_(o.stream) {
    check_cuda(cudaSetDevice(device_), "cudaSetDevice");
    ncclUniqueId id;
    std::memset(&id, 0, sizeof id);
    if (rank_ == 0) check(ncclGetUniqueId(&id), "ncclGetUniqueId");
    // Every rank contributes its id, rank 0's is the one: all_gather is the host collective that does it.
    std::vector<std::byte> ids(sizeof id * size_t(size_));
    bootstrap.all_gather(std::as_bytes(std::span(&id, 1)), ids);
    std::memcpy(&id, ids.data(), sizeof id);
    check(ncclCommInitRank(&comm_, size_, id, rank_), "ncclCommInitRank");
    check_cuda(cudaMalloc(&one_, sizeof(float)), "cudaMalloc");
  }
  ~NcclComm() override {
    if (one_) cudaFree(one_);
    if (comm_) ncclCommDestroy(comm_);
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  MemorySpace memory() const override { return MemorySpace::Device; }

  void all_to_all_v(std::span<const std::byte> send, std::span<const size_t> send_bytes, std::span<std::byte> recv,
                    std::span<const size_t> recv_bytes) override {
    const size_t N = size_t(size_);
    if (send_bytes.size() != N || recv_bytes.size() != N)
      fail("all_to_all_v: send_bytes has ", send_bytes.size(), " entries and recv_bytes ", recv_bytes.size(),
           ", expected one per rank (", N, ")");
    if (const size_t s = std::accumulate(send_bytes.begin(), send_bytes.end(), size_t(0)); s != send.size())
      fail("all_to_all_v: send_bytes add up to ", s, " bytes, the send buffer holds ", send.size());
    if (const size_t t = std::accumulate(recv_bytes.begin(), recv_bytes.end(), size_t(0)); t != recv.size())
      fail("all_to_all_v: recv_bytes add up to ", t, " bytes, the receive buffer holds ", recv.size());
    check(ncclGroupStart(), "ncclGroupStart");
    size_t so = 0, ro = 0;
    for (size_t p = 0; p < N; ++p) {
      if (send_bytes[p]) check(ncclSend(send.data() + so, send_bytes[p], ncclUint8, int(p), comm_, stream_), "ncclSend");
      if (recv_bytes[p]) check(ncclRecv(recv.data() + ro, recv_bytes[p], ncclUint8, int(p), comm_, stream_), "ncclRecv");
      so += send_bytes[p];
      ro += recv_bytes[p];
    }
    check(ncclGroupEnd(), "ncclGroupEnd (all_to_all_v)");
  }

  void all_gather(std::span<const std::byte> send, std::span<std::byte> recv) override {
    if (recv.size() != send.size() * size_t(size_))
      fail("all_gather: the receive buffer holds ", recv.size(), " bytes, expected ", size_, " x ", send.size());
    check(ncclAllGather(send.data(), recv.data(), send.size(), ncclUint8, comm_, stream_), "ncclAllGather");
  }

  void reduce_scatter_sum(std::span<const float> send, std::span<float> recv) override {
    if (send.size() != recv.size() * size_t(size_))
      fail("reduce_scatter_sum: the send buffer holds ", send.size(), " floats, expected ", size_, " x ", recv.size(),
           " (ranks x the receive buffer)");
    check(ncclReduceScatter(send.data(), recv.data(), recv.size(), ncclFloat32, ncclSum, comm_, stream_),
          "ncclReduceScatter");
  }

  void all_reduce_sum(std::span<const float> send, std::span<float> recv) override {
    if (send.size() != recv.size())
      fail("all_reduce_sum: the send buffer holds ", send.size(), " floats, the receive buffer ", recv.size());
    check(ncclAllReduce(send.data(), recv.data(), recv.size(), ncclFloat32, ncclSum, comm_, stream_), "ncclAllReduce");
  }

  void barrier() override {
    check(ncclAllReduce(one_, one_, 1, ncclFloat32, ncclSum, comm_, stream_), "ncclAllReduce (barrier)");
    check_cuda(cudaStreamSynchronize(stream_), "cudaStreamSynchronize (barrier)");
  }

 private:
  void check(ncclResult_t r, const char* what) const {
    if (r == ncclSuccess) return;
    const char* last = comm_ ? ncclGetLastError(comm_) : nullptr;
    fail("nccl comm: rank ", rank_, " of ", size_, " (device ", device_, "): ", what, " failed: ", ncclGetErrorString(r),
         last && *last ? cat(" (", last, ")") : std::string());
  }

  int rank_ = 0, size_ = 1, device_ = 0;
  cudaStream_t stream_ = nullptr;
  ncclComm_t comm_ = nullptr;
  float* one_ = nullptr;  // [1] device scratch of barrier()
};

}  // namespace

std::unique_ptr<Communicator> connect_nccl(Communicator& bootstrap, const NcclOptions& o) {
  if (bootstrap.memory() != MemorySpace::Host)
    fail("connect_nccl: the bootstrap communicator must be a host one (in-process or TCP)");
  return std::make_unique<NcclComm>(bootstrap, o);
}

}  // namespace dsv4::comm
