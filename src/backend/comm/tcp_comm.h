// The TCP transport of the host communicator: one process per rank, on one host or several, joined by
// a rendezvous like torchrun's (docs/multi-gpu.md). Rank 0 listens on MASTER_ADDR:MASTER_PORT, the
// other ranks connect to it (retrying until the timeout while rank 0 starts), and each collective
// goes through rank 0: every rank sends its contribution, rank 0 computes each rank's result
// (host_collective.h: the same function, the same bits as the in-process group) and sends it back.
// A star is enough for the CPU (CI, tests, small models); the GPUs use NCCL.
//
// Waits: the rendezvous and every collective wait at most `timeout`, then throw a one-line dsv4::Error
// naming the variable / address / rank they waited for; an all_gather with Wait::Unbounded
// (host_collective.h) waits without a limit while the connections hold. A connection that closes (the
// peer's process exited) fails the wait at once; the connections keep TCP keepalive on, so a peer
// whose host vanished fails it after about 4 x `timeout` of silence. A rank whose collective failed
// in the transport closes its connections: the group is unusable, and the peers learn it at once.
// Messages use this host's byte order (every rank runs the same build on the same kind of machine).
#pragma once
#include <chrono>
#include <functional>
#include <memory>
#include <string>

#include "backend/comm/host_collective.h"

namespace dsv4::comm {

struct Rendezvous {
  std::string master_addr;  // MASTER_ADDR: host name or address of rank 0
  int master_port = 0;      // MASTER_PORT: the port rank 0 listens on
  int rank = 0;             // RANK: 0 .. world_size - 1
  int world_size = 1;       // WORLD_SIZE: number of processes
  int local_rank = 0;       // LOCAL_RANK: this process's index on its host (its GPU); unused by the CPU transport
  std::chrono::milliseconds timeout{60000};  // DSV4_COMM_TIMEOUT (seconds), default 60
};

// The variables above read through `env` (a getenv; returns nullptr when unset). Throws dsv4::Error
// with one line naming the variable and what it expects when one is missing or malformed.
Rendezvous rendezvous_from_env(const std::function<const char*(const char*)>& env);
Rendezvous rendezvous_from_env();  // the process environment

// Joins the group: rank 0 listens and accepts world_size - 1 peers, the others connect. Throws a
// one-line dsv4::Error when the rendezvous fails (cannot listen, cannot reach rank 0, a peer of
// another world size or a duplicate rank, nobody came within the timeout).
std::unique_ptr<HostCommunicator> connect_tcp(const Rendezvous& r);

}  // namespace dsv4::comm
