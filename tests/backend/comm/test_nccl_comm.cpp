// The NCCL communicator (src/backend/comm/nccl_comm.h) on the GPUs present: one rank per GPU (up to 2),
// threads of this process bootstrapped by the in-process group, every collective on device buffers
// against hand-computed results (small integers in fp32: exact in any summation order). Skips without
// a GPU; compiled only in the CUDA build with NCCL.
#ifdef DSV4_HAVE_NCCL
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

#include "backend/comm/inprocess_comm.h"
#include "backend/comm/nccl_comm.h"

namespace dsv4::comm {
namespace {

void ok(cudaError_t e) {
  if (e != cudaSuccess) fail("CUDA: ", cudaGetErrorString(e));
}

template <typename T>
struct Dev {  // a device buffer of n T
  explicit Dev(size_t n) : n(n) { ok(cudaMalloc(&p, std::max<size_t>(n, 1) * sizeof(T))); }
  ~Dev() { cudaFree(p); }
  void put(const std::vector<T>& v) { ok(cudaMemcpy(p, v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice)); }
  std::vector<T> get() const {
    std::vector<T> v(n);
    ok(cudaMemcpy(v.data(), p, n * sizeof(T), cudaMemcpyDeviceToHost));
    return v;
  }
  std::span<T> span() { return {p, n}; }
  T* p = nullptr;
  size_t n;
};

TEST(NcclComm, CollectivesOnTheGpus) {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices < 1) GTEST_SKIP() << "no CUDA device";
  const int N = std::min(devices, 2);
  InProcessGroup g({.ranks = N});
  std::vector<std::string> errors(static_cast<size_t>(N));
  g.run([&](Communicator& host) {
    const int r = host.rank();
    std::string& err = errors[size_t(r)];
    ok(cudaSetDevice(r));
    cudaStream_t s;
    ok(cudaStreamCreate(&s));
    {
      auto c = connect_nccl(host, {.device = r, .stream = s});
      // all_to_all_v: rank r sends r + 2p + 1 int32 to p, values 1000 r + 100 p + i.
      std::vector<size_t> sc, rc;
      std::vector<int32_t> send, want;
      for (int p = 0; p < N; ++p) {
        sc.push_back(size_t(r + 2 * p + 1) * 4);
        rc.push_back(size_t(p + 2 * r + 1) * 4);
        for (int i = 0; i < r + 2 * p + 1; ++i) send.push_back(1000 * r + 100 * p + i);
        for (int i = 0; i < p + 2 * r + 1; ++i) want.push_back(1000 * p + 100 * r + i);
      }
      Dev<int32_t> ds(send.size()), dr(want.size());
      ds.put(send);
      c->all_to_all_v(std::as_bytes(ds.span()), sc, std::as_writable_bytes(dr.span()), rc);
      // all_reduce_sum and reduce_scatter_sum of small integers.
      Dev<float> x(4), y(4), xs(size_t(N) * 2), ys(2);
      x.put({float(r), 1.0f, float(2 * r), -1.0f});
      std::vector<float> xsv(size_t(N) * 2);
      for (size_t j = 0; j < xsv.size(); ++j) xsv[j] = float(j) + float(r);
      xs.put(xsv);
      c->all_reduce_sum(x.span(), y.span());
      c->reduce_scatter_sum(xs.span(), ys.span());
      Dev<uint8_t> gs(3), gr(size_t(N) * 3);
      gs.put({uint8_t(r), uint8_t(r + 10), uint8_t(r + 20)});
      c->all_gather(std::as_bytes(gs.span()), std::as_writable_bytes(gr.span()));
      c->barrier();
      ok(cudaStreamSynchronize(s));
      const float s1 = float(N * (N - 1) / 2);
      if (dr.get() != want) err += "all_to_all_v ";
      if (y.get() != std::vector<float>{s1, float(N), 2 * s1, -float(N)}) err += "all_reduce_sum ";
      const std::vector<float> ysv = ys.get();
      for (size_t i = 0; i < 2; ++i)
        if (ysv[i] != float(N) * float(size_t(r) * 2 + i) + s1) err += "reduce_scatter_sum ";
      std::vector<uint8_t> gw;
      for (int q = 0; q < N; ++q) gw.insert(gw.end(), {uint8_t(q), uint8_t(q + 10), uint8_t(q + 20)});
      if (gr.get() != gw) err += "all_gather ";
    }
    ok(cudaStreamDestroy(s));
  });
  for (int r = 0; r < N; ++r) EXPECT_EQ(errors[size_t(r)], "") << "rank " << r << " of " << N;
}

}  // namespace
}  // namespace dsv4::comm
#endif
