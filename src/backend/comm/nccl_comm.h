// The NCCL communicator (communicator.h on the GPUs): device buffers, collectives enqueued on one
// CUDA stream — they return once enqueued and do not synchronize, so a decode step that calls them can
// be captured in a CUDA graph. all_to_all_v is a group of ncclSend / ncclRecv (one pair per peer
// with a non-zero count), the others are ncclAllGather, ncclReduceScatter and ncclAllReduce (fp32 sum,
// NCCL's summation order: not the host communicators' rank order). barrier() is a one-float
// all-reduce followed by a stream synchronize.
//
// Unlike the host communicators NCCL cannot check sizes across ranks: all_to_all_v's recv_bytes must
// be right (a mismatch hangs or corrupts, as in NCCL itself); local checks (span lengths against the
// counts) still throw. Built only in the CUDA build with NCCL found (DSV4_HAVE_NCCL).
#pragma once
#include <memory>

#include "backend/comm/communicator.h"

struct CUstream_st;  // cudaStream_t, without the CUDA headers

namespace dsv4::comm {

struct NcclOptions {
  int device = 0;                   // the CUDA device of this rank (LOCAL_RANK with one process per GPU)
  CUstream_st* stream = nullptr;    // the stream collectives are enqueued on (not owned; nullptr: the legacy default stream)
};

// Creates this rank's NCCL communicator: rank 0 makes the NCCL unique id and `bootstrap` (a host
// communicator of the same group: the TCP rendezvous for processes, the in-process group for threads,
// one per GPU) hands it to every rank; then ncclCommInitRank with bootstrap's rank and size. Throws a
// one-line dsv4::Error naming the NCCL or CUDA call that failed.
std::unique_ptr<Communicator> connect_nccl(Communicator& bootstrap, const NcclOptions& o);

}  // namespace dsv4::comm
