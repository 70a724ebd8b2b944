// Timing of CUDA launches for the GPU microbenchmarks: `batch` calls captured in one CUDA graph, `warmup`
// untimed replays, then the median over `trials` replays (CUDA events) divided by the batch.
#pragma once
#include <cuda_runtime.h>

#include <algorithm>
#include <functional>
#include <vector>

#include "backend/cuda/check.h"
#include "backend/cuda/context.h"

namespace dsv4::cuda {

// Median time of one call of `launch(i)` (i = 0..batch-1 inside the graph), in microseconds.
inline double graph_time_us(const DeviceContext& ctx, int batch, const std::function<void(int)>& launch, int warmup = 3,
                            int trials = 15) {
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  DSV4_CUDA_CHECK(cudaStreamBeginCapture(ctx.stream(), cudaStreamCaptureModeThreadLocal));
  for (int i = 0; i < batch; ++i) launch(i);
  DSV4_CUDA_CHECK(cudaStreamEndCapture(ctx.stream(), &graph));
  DSV4_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
  cudaEvent_t a, b;
  DSV4_CUDA_CHECK(cudaEventCreate(&a));
  DSV4_CUDA_CHECK(cudaEventCreate(&b));
  for (int w = 0; w < warmup; ++w) DSV4_CUDA_CHECK(cudaGraphLaunch(exec, ctx.stream()));
  std::vector<double> t;
  for (int r = 0; r < trials; ++r) {
    DSV4_CUDA_CHECK(cudaEventRecord(a, ctx.stream()));
    DSV4_CUDA_CHECK(cudaGraphLaunch(exec, ctx.stream()));
    DSV4_CUDA_CHECK(cudaEventRecord(b, ctx.stream()));
    DSV4_CUDA_CHECK(cudaEventSynchronize(b));
    float ms = 0;
    DSV4_CUDA_CHECK(cudaEventElapsedTime(&ms, a, b));
    t.push_back(1000.0 * ms / batch);
  }
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

}  // namespace dsv4::cuda
