#include "backend/comm/host_collective.h"

#include <cstring>
#include <numeric>

namespace dsv4::comm {

const char* op_name(Op op) {
  switch (op) {
    case Op::Barrier: return "barrier";
    case Op::AllToAllV: return "all_to_all_v";
    case Op::AllGather: return "all_gather";
    case Op::ReduceScatterSum: return "reduce_scatter_sum";
    case Op::AllReduceSum: return "all_reduce_sum";
  }
  return "?";
}

namespace {

// acc[i] += floats [first, first + n) of `data` (byte views may be unaligned: read through memcpy).
void add_floats(std::vector<float>& acc, std::span<const std::byte> data, size_t first) {
  std::vector<float> v(acc.size());
  if (!v.empty()) std::memcpy(v.data(), data.data() + first * sizeof(float), v.size() * sizeof(float));
  for (size_t i = 0; i < acc.size(); ++i) acc[i] += v[i];
}

std::vector<std::byte> as_bytes_vec(const std::vector<float>& v) {
  std::vector<std::byte> out(v.size() * sizeof(float));
  if (!v.empty()) std::memcpy(out.data(), v.data(), out.size());
  return out;
}

// The sum in rank order of the floats [first, first + n) of every rank's data.
std::vector<std::byte> sum_in_rank_order(std::span<const Contribution> all, size_t first, size_t n) {
  std::vector<float> acc(n, 0.0f);
  if (n) std::memcpy(acc.data(), all[0].data.data() + first * sizeof(float), n * sizeof(float));
  for (size_t q = 1; q < all.size(); ++q) add_floats(acc, all[q].data, first);
  return as_bytes_vec(acc);
}

// Every rank's sizes[i] must equal rank 0's.
void require_same(std::span<const Contribution> all, size_t i, const char* what) {
  for (size_t q = 1; q < all.size(); ++q)
    if (all[q].sizes[i] != all[0].sizes[i])
      fail(op_name(all[0].op), ": rank ", q, " has ", all[q].sizes[i], " ", what, ", rank 0 has ", all[0].sizes[i],
           " (every rank must pass the same)");
}

}  // namespace

std::vector<std::byte> collective_output(std::span<const Contribution> all, int r) {
  const size_t N = all.size();
  for (size_t q = 0; q < N; ++q)
    if (!all[q].error.empty()) fail("rank ", q, ": ", all[q].error);
  for (size_t q = 1; q < N; ++q)
    if (all[q].op != all[0].op)
      fail("ranks called different collectives: rank 0 ", op_name(all[0].op), ", rank ", q, " ", op_name(all[q].op));
  const Op op = all[0].op;
  const size_t want = op == Op::Barrier ? 0 : op == Op::AllToAllV ? 2 * N : 2;
  for (size_t q = 0; q < N; ++q)
    if (all[q].sizes.size() != want)
      fail(op_name(op), ": rank ", q, " sent ", all[q].sizes.size(), " sizes, expected ", want,
           " (a rank of another group size?)");
  for (size_t q = 0; q < N; ++q) {  // the data must hold what the sizes promise (never read past it)
    const auto& s = all[q].sizes;
    const size_t n = op == Op::Barrier     ? 0
                     : op == Op::AllToAllV ? std::accumulate(s.begin(), s.begin() + N, size_t(0))
                     : op == Op::AllGather ? s[0]
                                           : s[0] * sizeof(float);
    if (all[q].data.size() != n)
      fail(op_name(op), ": rank ", q, " sent ", all[q].data.size(), " bytes of data, its sizes say ", n);
  }
  switch (op) {
    case Op::Barrier:
      return {};
    case Op::AllToAllV: {
      for (size_t p = 0; p < N; ++p)
        for (size_t q = 0; q < N; ++q)
          if (all[p].sizes[q] != all[q].sizes[N + p])
            fail("all_to_all_v: rank ", p, " sends ", all[p].sizes[q], " bytes to rank ", q, ", which expects ",
                 all[q].sizes[N + p]);
      std::vector<std::byte> out;
      for (size_t p = 0; p < N; ++p) {
        const auto& s = all[p].sizes;
        const size_t off = std::accumulate(s.begin(), s.begin() + r, size_t(0));
        out.insert(out.end(), all[p].data.begin() + off, all[p].data.begin() + off + s[size_t(r)]);
      }
      return out;
    }
    case Op::AllGather: {
      require_same(all, 0, "bytes to send");
      std::vector<std::byte> out;
      for (const Contribution& c : all) out.insert(out.end(), c.data.begin(), c.data.end());
      return out;
    }
    case Op::ReduceScatterSum: {
      require_same(all, 0, "floats to send");
      const size_t n = all[0].sizes[1];
      return sum_in_rank_order(all, size_t(r) * n, n);
    }
    case Op::AllReduceSum:
      require_same(all, 0, "floats");
      return sum_in_rank_order(all, 0, all[0].sizes[0]);
  }
  fail("collective_output: unknown collective ", int(op));
}

namespace {

// Appends n bytes (GCC 12 misreads vector::insert of an empty range as an overflow: memcpy instead).
void put_bytes(std::vector<std::byte>& out, const void* p, size_t n) {
  if (!n) return;
  const size_t at = out.size();
  out.resize(at + n);
  std::memcpy(out.data() + at, p, n);
}
template <typename T>
void put(std::vector<std::byte>& out, T v) {
  put_bytes(out, &v, sizeof(T));
}

class Reader {
 public:
  explicit Reader(std::span<const std::byte> b) : b_(b) {}
  template <typename T>
  T get() {
    T v;
    std::memcpy(&v, take(sizeof(T)).data(), sizeof(T));
    return v;
  }
  std::span<const std::byte> take(size_t n) {
    if (n > b_.size() - at_) fail("comm: a truncated message (", b_.size(), " bytes, wanted ", at_ + n, ")");
    auto s = b_.subspan(at_, n);
    at_ += n;
    return s;
  }
  bool done() const { return at_ == b_.size(); }

 private:
  std::span<const std::byte> b_;
  size_t at_ = 0;
};

}  // namespace

std::vector<std::byte> encode(const Contribution& c) {
  std::vector<std::byte> out;
  out.reserve(1 + 4 + c.error.size() + 4 + 8 * c.sizes.size() + 8 + c.data.size());
  put<uint8_t>(out, uint8_t(c.op));
  put<uint32_t>(out, uint32_t(c.error.size()));
  put_bytes(out, c.error.data(), c.error.size());
  put<uint32_t>(out, uint32_t(c.sizes.size()));
  for (uint64_t s : c.sizes) put<uint64_t>(out, s);
  put<uint64_t>(out, uint64_t(c.data.size()));
  put_bytes(out, c.data.data(), c.data.size());
  return out;
}

Contribution decode(std::span<const std::byte> bytes) {
  Reader rd(bytes);
  Contribution c;
  c.op = Op(rd.get<uint8_t>());
  const auto e = rd.take(rd.get<uint32_t>());
  c.error.assign(reinterpret_cast<const char*>(e.data()), e.size());
  const uint32_t ns = rd.get<uint32_t>();
  for (uint32_t i = 0; i < ns; ++i) c.sizes.push_back(rd.get<uint64_t>());
  c.data = rd.take(size_t(rd.get<uint64_t>()));
  if (!rd.done()) fail("comm: a message with trailing bytes");
  return c;
}

void HostCommunicator::run(const Contribution& mine, std::span<std::byte> recv, Wait wait) {
  const std::vector<std::byte> out = exchange(mine, wait);
  if (out.size() != recv.size())  // the checks before the exchange make this unreachable
    fail(op_name(mine.op), ": rank ", rank(), " got ", out.size(), " bytes for a buffer of ", recv.size());
  if (!out.empty()) std::memcpy(recv.data(), out.data(), out.size());
}

void HostCommunicator::all_to_all_v(std::span<const std::byte> send, std::span<const size_t> send_bytes,
                                    std::span<std::byte> recv, std::span<const size_t> recv_bytes) {
  const size_t N = size_t(size());
  Contribution c{.op = Op::AllToAllV};
  if (send_bytes.size() != N || recv_bytes.size() != N) {
    c.error = cat("all_to_all_v: send_bytes has ", send_bytes.size(), " entries and recv_bytes ", recv_bytes.size(),
                  ", expected one per rank (", N, ")");
  } else if (const size_t s = std::accumulate(send_bytes.begin(), send_bytes.end(), size_t(0)); s != send.size()) {
    c.error = cat("all_to_all_v: send_bytes add up to ", s, " bytes, the send buffer holds ", send.size());
  } else if (const size_t t = std::accumulate(recv_bytes.begin(), recv_bytes.end(), size_t(0)); t != recv.size()) {
    c.error = cat("all_to_all_v: recv_bytes add up to ", t, " bytes, the receive buffer holds ", recv.size());
  } else {
    c.sizes.assign(send_bytes.begin(), send_bytes.end());
    c.sizes.insert(c.sizes.end(), recv_bytes.begin(), recv_bytes.end());
    c.data = send;
  }
  run(c, recv, Wait::Bounded);
}

void HostCommunicator::all_gather(std::span<const std::byte> send, std::span<std::byte> recv) {
  all_gather(send, recv, Wait::Bounded);
}

void HostCommunicator::all_gather(std::span<const std::byte> send, std::span<std::byte> recv, Wait wait) {
  Contribution c{.op = Op::AllGather, .sizes = {send.size(), recv.size()}, .data = send};
  if (recv.size() != send.size() * size_t(size()))
    c.error = cat("all_gather: the receive buffer holds ", recv.size(), " bytes, expected ", size(), " x ", send.size());
  run(c, recv, wait);
}

void HostCommunicator::reduce_scatter_sum(std::span<const float> send, std::span<float> recv) {
  Contribution c{.op = Op::ReduceScatterSum, .sizes = {send.size(), recv.size()}, .data = std::as_bytes(send)};
  if (send.size() != recv.size() * size_t(size()))
    c.error = cat("reduce_scatter_sum: the send buffer holds ", send.size(), " floats, expected ", size(), " x ",
                  recv.size(), " (ranks x the receive buffer)");
  run(c, std::as_writable_bytes(recv), Wait::Bounded);
}

void HostCommunicator::all_reduce_sum(std::span<const float> send, std::span<float> recv) {
  Contribution c{.op = Op::AllReduceSum, .sizes = {send.size(), recv.size()}, .data = std::as_bytes(send)};
  if (send.size() != recv.size())
    c.error = cat("all_reduce_sum: the send buffer holds ", send.size(), " floats, the receive buffer ", recv.size());
  run(c, std::as_writable_bytes(recv), Wait::Bounded);
}

void HostCommunicator::barrier() { run(Contribution{.op = Op::Barrier}, {}, Wait::Bounded); }

}  // namespace dsv4::comm
