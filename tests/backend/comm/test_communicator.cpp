// The host communicators (src/backend/comm): every collective on 1, 2 and 4 in-process ranks against
// hand-computed results, bit-identical sums over repeated runs, one-line errors on every rank for
// inconsistent calls, bounded waits, and a two-process group over the TCP rendezvous on 127.0.0.1.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <bit>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <future>
#include <map>
#include <numeric>
#include <random>
#include <thread>

#include "backend/comm/inprocess_comm.h"
#include "backend/comm/tcp_comm.h"
#include "support/free_port.h"

namespace dsv4::comm {
namespace {

using namespace std::chrono_literals;
using test::free_port;

// Elements rank `from` sends to rank `to` in the uneven all_to_all_v: 0, 1 or 2 (zeros included).
size_t count(int from, int to) { return size_t((from + 2 * to) % 3); }
int32_t value(int from, int to, size_t i) { return int32_t(1000 * from + 100 * to + int(i)); }

// Rank r's all_to_all_v: send count(r, p) values to each p, return what arrived.
std::vector<int32_t> uneven_all_to_all(Communicator& c) {
  const int r = c.rank(), N = c.size();
  std::vector<size_t> sc, rc;
  std::vector<int32_t> send;
  for (int p = 0; p < N; ++p) {
    sc.push_back(count(r, p));
    rc.push_back(count(p, r));
    for (size_t i = 0; i < count(r, p); ++i) send.push_back(value(r, p, i));
  }
  std::vector<int32_t> recv(std::accumulate(rc.begin(), rc.end(), size_t(0)), -1);
  all_to_all_v<int32_t>(c, send, sc, recv, rc);
  return recv;
}

std::vector<int32_t> expected_all_to_all(int r, int N) {
  std::vector<int32_t> e;
  for (int p = 0; p < N; ++p)
    for (size_t i = 0; i < count(p, r); ++i) e.push_back(value(p, r, i));
  return e;
}

class Ranks : public ::testing::TestWithParam<int> {};

TEST_P(Ranks, AllToAllVUnevenAndZeroCounts) {
  const int N = GetParam();
  InProcessGroup g({.ranks = N});
  std::vector<std::vector<int32_t>> got(static_cast<size_t>(N));
  g.run([&](Communicator& c) { got[size_t(c.rank())] = uneven_all_to_all(c); });
  for (int r = 0; r < N; ++r) EXPECT_EQ(got[size_t(r)], expected_all_to_all(r, N)) << "rank " << r;
  // Hand-checked for 4 ranks, rank 1 receives: from 0 count(0,1) = 2 {100, 101}, from 1 count(1,1) = 0,
  // from 2 count(2,1) = 1 {2100}, from 3 count(3,1) = 2 {3100, 3101}.
  if (N == 4) {
    EXPECT_EQ(got[1], (std::vector<int32_t>{100, 101, 2100, 3100, 3101}));
  }
}

TEST_P(Ranks, AllToAllVEverythingZero) {
  const int N = GetParam();
  InProcessGroup g({.ranks = N});
  std::vector<size_t> sizes(size_t(N), 99);
  g.run([&](Communicator& c) {
    std::vector<size_t> zero(size_t(N), 0);
    std::vector<float> none;
    all_to_all_v<float>(c, none, zero, none, zero);
    sizes[size_t(c.rank())] = none.size();
  });
  EXPECT_EQ(sizes, std::vector<size_t>(size_t(N), 0));
}

TEST_P(Ranks, AllGather) {
  const int N = GetParam();
  InProcessGroup g({.ranks = N});
  std::vector<std::vector<int16_t>> got(static_cast<size_t>(N));
  g.run([&](Communicator& c) {
    const int16_t r = int16_t(c.rank());
    const std::vector<int16_t> mine{int16_t(10 * r), int16_t(10 * r + 1), int16_t(10 * r + 2)};
    std::vector<int16_t> all(3 * size_t(N));
    all_gather<int16_t>(c, mine, all);
    got[size_t(r)] = all;
  });
  std::vector<int16_t> want;
  for (int r = 0; r < N; ++r)
    for (int i = 0; i < 3; ++i) want.push_back(int16_t(10 * r + i));
  for (int r = 0; r < N; ++r) EXPECT_EQ(got[size_t(r)], want) << "rank " << r;
}

TEST_P(Ranks, ReduceScatterSum) {
  const int N = GetParam();
  constexpr size_t c = 3;
  InProcessGroup g({.ranks = N});
  std::vector<std::vector<float>> got(static_cast<size_t>(N));
  g.run([&](Communicator& comm) {
    const int r = comm.rank();
    std::vector<float> send(size_t(N) * c);
    for (size_t j = 0; j < send.size(); ++j) send[j] = float(r) + 0.5f * float(j);  // exact in fp32
    std::vector<float> recv(c, -1.0f);
    comm.reduce_scatter_sum(send, recv);
    got[size_t(r)] = recv;
  });
  // recv_r[i] = sum_q (q + 0.5 (r c + i)) = N (N - 1) / 2 + N 0.5 (r c + i).
  for (int r = 0; r < N; ++r)
    for (size_t i = 0; i < c; ++i)
      EXPECT_EQ(got[size_t(r)][i], float(N * (N - 1) / 2) + float(N) * 0.5f * float(size_t(r) * c + i))
          << "rank " << r << " element " << i;
  if (N == 2) {
    EXPECT_EQ(got[1], (std::vector<float>{4.0f, 5.0f, 6.0f}));  // (0 + 1) + 2 x 0.5 x {3, 4, 5}
  }
}

TEST_P(Ranks, AllReduceSumSeparateAndInPlace) {
  const int N = GetParam();
  InProcessGroup g({.ranks = N});
  std::vector<std::vector<float>> sep(static_cast<size_t>(N)), inplace(static_cast<size_t>(N));
  g.run([&](Communicator& c) {
    const int r = c.rank();
    const std::vector<float> send{float(r), float(r * r), 1.0f, -2.0f * float(r)};
    std::vector<float> recv(4);
    c.all_reduce_sum(send, recv);
    sep[size_t(r)] = recv;
    std::vector<float> x = send;
    c.all_reduce_sum(x, x);
    inplace[size_t(r)] = x;
  });
  const float s1 = float(N * (N - 1) / 2), s2 = float((N - 1) * N * (2 * N - 1) / 6);
  const std::vector<float> want{s1, s2, float(N), -2.0f * s1};
  for (int r = 0; r < N; ++r) {
    EXPECT_EQ(sep[size_t(r)], want) << "rank " << r;
    EXPECT_EQ(inplace[size_t(r)], want) << "rank " << r;
  }
}

TEST_P(Ranks, BarrierWaitsForEveryRank) {
  const int N = GetParam();
  InProcessGroup g({.ranks = N});
  std::atomic<int> before{0};
  std::vector<int> seen(size_t(N), -1);
  g.run([&](Communicator& c) {
    if (c.rank() == N - 1) std::this_thread::sleep_for(20ms);  // the last rank comes late
    ++before;
    c.barrier();
    seen[size_t(c.rank())] = before.load();
  });
  EXPECT_EQ(seen, std::vector<int>(size_t(N), N));
}

// Values of mixed magnitudes whose fp32 sum depends on the order of the additions.
std::vector<float> awkward(int rank, size_t n) {
  std::mt19937 gen(uint32_t(77 + rank));
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = u(gen) * (i % 3 == 0 ? 1e7f : i % 3 == 1 ? 1.0f : 1e-4f);
  return v;
}

// ((x_0 + x_1) + x_2) + ... in fp32: the order communicator.h promises.
std::vector<float> sum_in_rank_order(int N, size_t n) {
  std::vector<float> acc = awkward(0, n);
  for (int q = 1; q < N; ++q) {
    const std::vector<float> x = awkward(q, n);
    for (size_t i = 0; i < n; ++i) acc[i] += x[i];
  }
  return acc;
}

std::vector<uint32_t> bits(const std::vector<float>& v) {
  std::vector<uint32_t> b;
  for (float x : v) b.push_back(std::bit_cast<uint32_t>(x));
  return b;
}

TEST_P(Ranks, SumsAreInRankOrderAndRepeatBitForBit) {
  const int N = GetParam();
  constexpr size_t n = 300;
  const std::vector<uint32_t> want = bits(sum_in_rank_order(N, n));
  InProcessGroup g({.ranks = N});
  for (int run = 0; run < 20; ++run) {
    std::vector<std::vector<uint32_t>> got(static_cast<size_t>(N)), scattered(static_cast<size_t>(N));
    g.run([&](Communicator& c) {
      const std::vector<float> x = awkward(c.rank(), n);
      std::vector<float> y(n);
      if (c.rank() % 2) std::this_thread::sleep_for(1ms);  // vary the arrival order
      c.all_reduce_sum(x, y);
      got[size_t(c.rank())] = bits(y);
      std::vector<float> xs(size_t(N) * 10), ys(10);
      for (size_t j = 0; j < xs.size(); ++j) xs[j] = x[j % n];
      c.reduce_scatter_sum(xs, ys);
      scattered[size_t(c.rank())] = bits(ys);
    });
    for (int r = 0; r < N; ++r) {
      ASSERT_EQ(got[size_t(r)], want) << "run " << run << " rank " << r;
      for (size_t i = 0; i < 10; ++i)
        ASSERT_EQ(scattered[size_t(r)][i], want[(size_t(r) * 10 + i) % n]) << "run " << run << " rank " << r;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Comm, Ranks, ::testing::Values(1, 2, 4), [](const auto& i) { return cat(i.param, "ranks"); });

TEST(InProcessComm, TheOrderOfTheSumMatters) {  // so the test above can tell rank order from another
  const std::vector<float> fwd = sum_in_rank_order(4, 300);
  std::vector<float> rev = awkward(3, 300);
  for (int q = 2; q >= 0; --q) {
    const std::vector<float> x = awkward(q, 300);
    for (size_t i = 0; i < rev.size(); ++i) rev[i] += x[i];
  }
  EXPECT_NE(bits(fwd), bits(rev));
}

// Runs fn on N ranks and returns each rank's error message ("" when it did not throw).
std::vector<std::string> errors_of(InProcessGroup& g, const std::function<void(HostCommunicator&)>& fn) {
  std::vector<std::string> out(size_t(g.size()));
  g.run([&](HostCommunicator& c) {
    try {
      fn(c);
    } catch (const Error& e) {
      out[size_t(c.rank())] = e.what();
    }
  });
  return out;
}

void expect_same_error(const std::vector<std::string>& errs, const std::string& part) {
  for (size_t r = 0; r < errs.size(); ++r) {
    EXPECT_NE(errs[r].find(part), std::string::npos) << "rank " << r << ": '" << errs[r] << "'";
    EXPECT_EQ(errs[r], errs[0]) << "rank " << r;
    EXPECT_EQ(errs[r].find('\n'), std::string::npos);
  }
}

TEST(InProcessComm, MismatchedSizesFailOnEveryRankAndTheGroupGoesOn) {
  InProcessGroup g({.ranks = 3});
  expect_same_error(errors_of(g,
                              [](Communicator& c) {
                                std::vector<float> x(c.rank() == 1 ? 3 : 4, 1.0f);
                                c.all_reduce_sum(x, x);
                              }),
                    "all_reduce_sum: rank 1 has 3 floats, rank 0 has 4");
  expect_same_error(errors_of(g,
                              [](Communicator& c) {
                                std::vector<uint8_t> x(c.rank() == 2 ? 2 : 1), y(3 * x.size());
                                all_gather<uint8_t>(c, x, y);
                              }),
                    "all_gather: rank 2 has 2 bytes to send, rank 0 has 1");
  // Rank 0 sends 2 elements (8 bytes) to rank 1, which expects 1.
  expect_same_error(errors_of(g,
                              [](Communicator& c) {
                                std::vector<size_t> sc(3, 0), rc(3, 0);
                                if (c.rank() == 0) sc[1] = 2;
                                if (c.rank() == 1) rc[0] = 1;
                                std::vector<int32_t> s(2 * (c.rank() == 0)), r(c.rank() == 1);
                                all_to_all_v<int32_t>(c, s, sc, r, rc);
                              }),
                    "all_to_all_v: rank 0 sends 8 bytes to rank 1, which expects 4");
  expect_same_error(errors_of(g,
                              [](Communicator& c) {
                                std::vector<float> x(4);
                                if (c.rank() == 2)
                                  c.barrier();
                                else
                                  c.all_reduce_sum(x, x);
                              }),
                    "ranks called different collectives: rank 0 all_reduce_sum, rank 2 barrier");
  // A local argument error (a buffer that does not match its counts) is reported on every rank.
  expect_same_error(errors_of(g,
                              [](Communicator& c) {
                                std::vector<size_t> sc(3, 1), rc(3, 1);
                                std::vector<int32_t> s(c.rank() == 1 ? 2 : 3), r(3);
                                all_to_all_v<int32_t>(c, s, sc, r, rc);
                              }),
                    "rank 1: all_to_all_v: send_bytes add up to 12 bytes, the send buffer holds 8");
  expect_same_error(errors_of(g,
                              [](Communicator& c) {
                                std::vector<float> s(7), r(2);
                                c.reduce_scatter_sum(s, r);
                              }),
                    "rank 0: reduce_scatter_sum: the send buffer holds 7 floats, expected 3 x 2");
  std::vector<std::vector<float>> after(3);  // the group still works
  g.run([&](Communicator& c) {
    std::vector<float> x{float(c.rank() + 1)};
    c.all_reduce_sum(x, x);
    after[size_t(c.rank())] = x;
  });
  EXPECT_EQ(after, std::vector<std::vector<float>>(3, {6.0f}));
}

TEST(InProcessComm, AMissingRankGivesAnErrorNotAHang) {
  InProcessGroup g({.ranks = 3, .timeout = 200ms});
  const auto errs = errors_of(g, [](Communicator& c) {
    if (c.rank() == 1) return;  // never arrives
    c.barrier();
  });
  for (int r : {0, 2}) {
    EXPECT_NE(errs[size_t(r)].find("in barrier for rank(s) 1; the group is unusable"), std::string::npos) << errs[size_t(r)];
  }
  EXPECT_EQ(errs[1], "");
  EXPECT_THROW(g.rank(0).barrier(), Error);  // the group is broken from then on
}

// Wait::Unbounded: rank 1 waits for rank 0's next step (as the other ranks of a rank group wait for rank
// 0's next Model call) five times the timeout, and the all_gather completes; a rank that never comes
// still breaks the group, and that ends the unbounded wait too, with the same line.
TEST(InProcessComm, AnUnboundedWaitOutlastsTheTimeoutUntilTheGroupBreaks) {
  InProcessGroup g({.ranks = 2, .timeout = 100ms});
  std::atomic<bool> waiting{false};
  std::vector<std::vector<uint8_t>> got(2, std::vector<uint8_t>(2));
  g.run([&](HostCommunicator& c) {
    const uint8_t mine = uint8_t(10 + c.rank());
    if (c.rank() == 1) {
      waiting = true;
      all_gather<uint8_t>(c, std::span(&mine, 1), got[1], Wait::Unbounded);
      return;
    }
    while (!waiting) std::this_thread::yield();
    std::this_thread::sleep_for(500ms);
    all_gather<uint8_t>(c, std::span(&mine, 1), got[0], Wait::Bounded);
  });
  EXPECT_EQ(got, (std::vector<std::vector<uint8_t>>(2, {10, 11})));

  InProcessGroup three({.ranks = 3, .timeout = 200ms});
  const auto errs = errors_of(three, [](HostCommunicator& c) {
    if (c.rank() == 2) return;  // never arrives
    const uint8_t mine = 1;
    std::vector<uint8_t> all(3);
    all_gather<uint8_t>(c, std::span(&mine, 1), all, c.rank() == 1 ? Wait::Unbounded : Wait::Bounded);
  });
  EXPECT_EQ(errs[0], "in-process comm: rank 0 waited 200 ms in all_gather for rank(s) 2; the group is unusable");
  EXPECT_EQ(errs[1], errs[0]);
}

TEST(InProcessComm, BadGroups) {
  EXPECT_THROW(InProcessGroup({.ranks = 0}), Error);
  EXPECT_THROW(InProcessGroup({.ranks = 2, .timeout = 0ms}), Error);
  InProcessGroup g({.ranks = 2});
  EXPECT_THROW(g.rank(2), Error);
}

TEST(HostCollective, EncodeDecodeRoundTripAndMalformedMessages) {
  const std::vector<float> x{1.0f, -2.5f, 3.0f};
  const Contribution c{.op = Op::AllReduceSum, .sizes = {3, 3}, .data = std::as_bytes(std::span(x)), .error = "e"};
  const std::vector<std::byte> b = encode(c);
  const Contribution d = decode(b);
  EXPECT_EQ(d.op, Op::AllReduceSum);
  EXPECT_EQ(d.sizes, (std::vector<uint64_t>{3, 3}));
  EXPECT_EQ(d.error, "e");
  ASSERT_EQ(d.data.size(), 12u);
  EXPECT_EQ(std::memcmp(d.data.data(), x.data(), 12), 0);
  EXPECT_THROW(decode(std::span(b).first(b.size() - 1)), Error);  // truncated
  std::vector<std::byte> longer = b;
  longer.push_back(std::byte(0));
  EXPECT_THROW(decode(longer), Error);  // trailing bytes
  // A contribution whose data disagree with its sizes is refused before anything is read.
  Contribution short_data{.op = Op::AllReduceSum, .sizes = {4, 4}, .data = std::as_bytes(std::span(x))};
  const std::vector<Contribution> all{short_data};
  try {
    collective_output(all, 0);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), "all_reduce_sum: rank 0 sent 12 bytes of data, its sizes say 16");
  }
}

// ---- The rendezvous and the TCP transport.

std::function<const char*(const char*)> env_of(const std::map<std::string, std::string>& m) {
  return [m](const char* name) -> const char* {
    auto it = m.find(name);
    return it == m.end() ? nullptr : it->second.c_str();
  };
}

std::string env_error(const std::map<std::string, std::string>& m) {
  try {
    rendezvous_from_env(env_of(m));
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(Rendezvous, ReadsTheTorchrunVariables) {
  const Rendezvous r = rendezvous_from_env(env_of({{"MASTER_ADDR", "127.0.0.1"}, {"MASTER_PORT", "29500"},
                                                   {"RANK", "1"}, {"WORLD_SIZE", "4"}, {"LOCAL_RANK", "1"},
                                                   {"DSV4_COMM_TIMEOUT", "5"}}));
  EXPECT_EQ(r.master_addr, "127.0.0.1");
  EXPECT_EQ(r.master_port, 29500);
  EXPECT_EQ(r.rank, 1);
  EXPECT_EQ(r.world_size, 4);
  EXPECT_EQ(r.local_rank, 1);
  EXPECT_EQ(r.timeout, 5000ms);
}

TEST(Rendezvous, BadOrMissingVariablesGiveOneLineErrors) {
  const std::map<std::string, std::string> good{
      {"MASTER_ADDR", "127.0.0.1"}, {"MASTER_PORT", "29500"}, {"RANK", "0"}, {"WORLD_SIZE", "2"}, {"LOCAL_RANK", "0"}};
  auto with = [&](const std::string& k, const char* v) {
    auto m = good;
    if (v)
      m[k] = v;
    else
      m.erase(k);
    return env_error(m);
  };
  EXPECT_EQ(env_error(good), "");
  EXPECT_EQ(with("MASTER_ADDR", nullptr),
            "MASTER_ADDR is not set (expected the host name or address of rank 0, e.g. 127.0.0.1)");
  EXPECT_EQ(with("MASTER_PORT", "abc"), "MASTER_PORT: expected the TCP port rank 0 listens on (1 to 65535), got 'abc'");
  EXPECT_EQ(with("MASTER_PORT", "70000"),
            "MASTER_PORT: expected the TCP port rank 0 listens on (1 to 65535), got '70000'");
  EXPECT_EQ(with("WORLD_SIZE", nullptr), "WORLD_SIZE is not set (expected the number of processes)");
  EXPECT_EQ(with("RANK", "2"), "RANK: expected this process's rank, below WORLD_SIZE (0 to 1), got '2'");
  EXPECT_EQ(with("RANK", "-1"), "RANK: expected this process's rank, below WORLD_SIZE (0 to 1), got '-1'");
  EXPECT_EQ(with("LOCAL_RANK", nullptr), "LOCAL_RANK is not set (expected this process's index on its host)");
  EXPECT_EQ(with("DSV4_COMM_TIMEOUT", "0"), "DSV4_COMM_TIMEOUT: expected seconds to wait for peers (1 to 86400), got '0'");
}

// What each of the two processes checks: uneven all_to_all_v, all_reduce_sum (rank-order bits),
// all_gather and reduce_scatter_sum. Returns "" or what went wrong.
std::string two_rank_checks(Communicator& c) {
  if (c.size() != 2) return cat("size ", c.size());
  if (uneven_all_to_all(c) != expected_all_to_all(c.rank(), 2)) return "all_to_all_v";
  const std::vector<float> x = awkward(c.rank(), 300);
  std::vector<float> y(300);
  c.all_reduce_sum(x, y);
  if (bits(y) != bits(sum_in_rank_order(2, 300))) return "all_reduce_sum";
  std::vector<int16_t> mine{int16_t(7 * c.rank())}, all(2);
  all_gather<int16_t>(c, mine, all);
  if (all != std::vector<int16_t>{0, 7}) return "all_gather";
  std::vector<float> s{1.0f, 2.0f, float(c.rank()), 3.0f}, r(2);
  c.reduce_scatter_sum(s, r);
  if (r != (c.rank() == 0 ? std::vector<float>{2.0f, 4.0f} : std::vector<float>{1.0f, 6.0f})) return "reduce_scatter_sum";
  c.barrier();
  try {  // mismatched sizes: an error on both processes, and the group goes on
    std::vector<float> z(c.rank() + 1);
    c.all_reduce_sum(z, z);
    return "no error for mismatched sizes";
  } catch (const Error& e) {
    if (std::string(e.what()) != "all_reduce_sum: rank 1 has 2 floats, rank 0 has 1 (every rank must pass the same)")
      return cat("mismatch error '", e.what(), "'");
  }
  std::vector<float> one{1.0f};
  c.all_reduce_sum(one, one);
  return one[0] == 2.0f ? "" : "all_reduce_sum after an error";
}

void set_env(int rank, int port) {
  setenv("MASTER_ADDR", "127.0.0.1", 1);
  setenv("MASTER_PORT", std::to_string(port).c_str(), 1);
  setenv("RANK", std::to_string(rank).c_str(), 1);
  setenv("WORLD_SIZE", "2", 1);
  setenv("LOCAL_RANK", std::to_string(rank).c_str(), 1);
  setenv("DSV4_COMM_TIMEOUT", "30", 1);
}

// Forks a child that runs `child` and exits with its result (0 = ok). Returns the child's pid.
pid_t fork_child(const std::function<int()>& child) {
  const pid_t pid = ::fork();
  if (pid == 0) {
    int rc = 3;
    try {
      rc = child();
    } catch (...) {
    }
    std::fflush(nullptr);
    ::_exit(rc);
  }
  return pid;
}

// The child's exit status, waiting at most `limit` (then it is killed: -1).
int wait_child(pid_t pid, std::chrono::seconds limit) {
  const auto end = std::chrono::steady_clock::now() + limit;
  int status = 0;
  while (std::chrono::steady_clock::now() < end) {
    if (::waitpid(pid, &status, WNOHANG) == pid) return WIFEXITED(status) ? WEXITSTATUS(status) : -2;
    std::this_thread::sleep_for(20ms);
  }
  ::kill(pid, SIGKILL);
  ::waitpid(pid, &status, 0);
  return -1;
}

TEST(TcpComm, TwoProcessesOverTheRendezvous) {
  const int port = free_port();
  const pid_t child = fork_child([port] {
    set_env(1, port);
    auto c = connect_tcp(rendezvous_from_env());
    const std::string err = two_rank_checks(*c);
    if (!err.empty()) std::fprintf(stderr, "rank 1: %s\n", err.c_str());
    return err.empty() ? 0 : 1;
  });
  ASSERT_GT(child, 0);
  set_env(0, port);
  std::string err;
  try {
    auto c = connect_tcp(rendezvous_from_env());
    EXPECT_EQ(c->rank(), 0);
    err = two_rank_checks(*c);
  } catch (const Error& e) {
    err = e.what();
  }
  EXPECT_EQ(err, "") << "rank 0";
  EXPECT_EQ(wait_child(child, 60s), 0) << "rank 1 (the child)";
}

TEST(TcpComm, RendezvousFailuresNameTheAddressAndTheRanks) {
  const int port = free_port();
  Rendezvous r{.master_addr = "127.0.0.1", .master_port = port, .rank = 1, .world_size = 2, .timeout = 500ms};
  try {
    connect_tcp(r);
    ADD_FAILURE() << "rank 1 reached a rank 0 that does not exist";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(cat("rendezvous: rank 1 could not reach rank 0 at MASTER_ADDR:MASTER_PORT = ",
                                             "127.0.0.1:", port, " within 0.5 s")),
              std::string::npos)
        << e.what();
  }
  r.rank = 0;
  r.world_size = 3;
  try {
    connect_tcp(r);
    ADD_FAILURE() << "rank 0 found peers that do not exist";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), cat("rendezvous: rank 0 waited 0.5 s on MASTER_ADDR:MASTER_PORT = 127.0.0.1:", port,
                                         " for rank(s) 1, 2 of WORLD_SIZE=3"));
  }
  r.master_addr = "no-such-host.invalid";
  EXPECT_THROW(connect_tcp(r), Error);
}

TEST(TcpComm, APeerOfAnotherWorldSizeIsRefused) {
  const int port = free_port();
  const pid_t child = fork_child([port] {
    try {
      connect_tcp({.master_addr = "127.0.0.1", .master_port = port, .rank = 1, .world_size = 3, .timeout = 20s});
    } catch (const Error& e) {
      return std::string(e.what()) == "rendezvous: rank 1 has WORLD_SIZE=3, rank 0 has WORLD_SIZE=2" ? 0 : 1;
    }
    return 2;
  });
  ASSERT_GT(child, 0);
  try {
    connect_tcp({.master_addr = "127.0.0.1", .master_port = port, .rank = 0, .world_size = 2, .timeout = 20s});
    ADD_FAILURE() << "rank 0 accepted a peer of WORLD_SIZE=3";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), "rendezvous: rank 1 has WORLD_SIZE=3, rank 0 has WORLD_SIZE=2");
  }
  EXPECT_EQ(wait_child(child, 60s), 0);
}

// A TCP group of n ranks on 127.0.0.1 as communicators of this process (each rank joins on its own
// thread; a rank that could not join is null).
std::vector<std::unique_ptr<HostCommunicator>> tcp_group(int n, std::chrono::milliseconds timeout) {
  const int port = free_port();
  std::vector<std::unique_ptr<HostCommunicator>> ranks(static_cast<size_t>(n));
  std::vector<std::thread> joining;
  for (int r = 0; r < n; ++r)
    joining.emplace_back([&, r] {
      try {
        ranks[size_t(r)] = connect_tcp(
            {.master_addr = "127.0.0.1", .master_port = port, .rank = r, .world_size = n, .timeout = timeout});
      } catch (const Error&) {
      }
    });
  for (std::thread& t : joining) t.join();
  return ranks;
}

// Rank 1 of a TCP group with a 0.5 s timeout waits for rank 0's all_gather three times as long with
// Wait::Unbounded, and it completes; a collective inside a step keeps the bound: its barrier, which
// rank 0 never joins, fails after the timeout with one line naming the collective and the rank.
TEST(TcpComm, AnUnboundedWaitOutlastsTheTimeoutABoundedOneDoesNot) {
  auto g = tcp_group(2, 500ms);
  ASSERT_TRUE(g[0] && g[1]);
  std::atomic<bool> waiting{false};
  std::vector<uint8_t> got0(2), got1(2);
  auto rank1 = std::async(std::launch::async, [&] {
    const uint8_t mine = 11;
    try {
      waiting = true;
      all_gather<uint8_t>(*g[1], std::span(&mine, 1), got1, Wait::Unbounded);
      g[1]->barrier();
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string();
  });
  while (!waiting) std::this_thread::yield();
  std::this_thread::sleep_for(1500ms);
  const uint8_t mine = 10;
  EXPECT_NO_THROW(all_gather<uint8_t>(*g[0], std::span(&mine, 1), got0, Wait::Bounded));
  EXPECT_EQ(rank1.get(), "tcp comm: timed out waiting for rank 0 (barrier)");
  EXPECT_EQ(got0, (std::vector<uint8_t>{10, 11}));
  EXPECT_EQ(got1, got0);
}

// Rank 0's process exits (no stop, no close: the kernel closes its socket, as for a crash) while rank 1
// waits for it without a limit: rank 1's all_gather fails at once with one line, not after the 30 s
// timeout and not never.
TEST(TcpComm, AnUnboundedWaitEndsAtOnceWhenRank0Exits) {
  const int port = free_port();
  ASSERT_GT(port, 0);
  const Rendezvous rv{.master_addr = "127.0.0.1", .master_port = port, .world_size = 2, .timeout = 30s};
  const pid_t child = fork_child([rv] {
    Rendezvous mine = rv;
    mine.rank = 0;
    auto c = connect_tcp(mine);
    c->barrier();
    // Rank 1 is on its way into the all_gather (had it not begun waiting yet, it must fail all the same).
    std::this_thread::sleep_for(200ms);
    ::_exit(0);
    return 0;
  });
  ASSERT_GT(child, 0);
  Rendezvous mine = rv;
  mine.rank = 1;
  auto c = connect_tcp(mine);
  c->barrier();
  const auto start = std::chrono::steady_clock::now();
  std::string error;
  try {
    const uint8_t byte = 1;
    std::vector<uint8_t> all(2);
    all_gather<uint8_t>(*c, std::span(&byte, 1), all, Wait::Unbounded);
  } catch (const Error& e) {
    error = e.what();
  }
  EXPECT_LT(std::chrono::steady_clock::now() - start, 5s);
  EXPECT_EQ(error.rfind("tcp comm: lost the connection to rank 0 (all_gather): ", 0), 0u) << error;
  EXPECT_EQ(error.find('\n'), std::string::npos) << error;
  EXPECT_EQ(wait_child(child, 10s), 0);
}

// A rank whose collective failed in the transport closes its connections: rank 0 loses rank 2 in an
// all_gather, and rank 1, which waits for that all_gather without a limit, learns it at once.
TEST(TcpComm, ABrokenGroupEndsTheUnboundedWaitsOfTheOthers) {
  auto g = tcp_group(3, 30s);
  ASSERT_TRUE(g[0] && g[1] && g[2]);
  g[2].reset();  // rank 2 leaves
  auto waited = std::async(std::launch::async, [&] {
    const uint8_t mine = 1;
    std::vector<uint8_t> all(3);
    try {
      all_gather<uint8_t>(*g[1], std::span(&mine, 1), all, Wait::Unbounded);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string();
  });
  try {
    const uint8_t mine = 0;
    std::vector<uint8_t> all(3);
    all_gather<uint8_t>(*g[0], std::span(&mine, 1), all, Wait::Bounded);
    ADD_FAILURE() << "rank 0 gathered from a rank that left";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()).rfind("tcp comm: lost the connection to rank 2 (all_gather): ", 0), 0u) << e.what();
  }
  EXPECT_EQ(waited.wait_for(5s), std::future_status::ready) << "rank 1 still waits for a broken group";
  g[0].reset();  // (ends rank 1's wait in any case)
  EXPECT_EQ(waited.get().rfind("tcp comm: lost the connection to rank 0 (all_gather): ", 0), 0u);
}

TEST(TcpComm, AGroupOfOneNeedsNoNetwork) {
  auto c = connect_tcp({.master_addr = "127.0.0.1", .master_port = 1, .rank = 0, .world_size = 1});
  std::vector<float> x{1.5f, -2.0f};
  c->all_reduce_sum(x, x);
  EXPECT_EQ(x, (std::vector<float>{1.5f, -2.0f}));
}

}  // namespace
}  // namespace dsv4::comm
