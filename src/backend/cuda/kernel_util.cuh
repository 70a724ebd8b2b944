// Helpers shared by the kernel files (device code: include from .cu files only).
#pragma once
#include <cstdint>
#include <algorithm>
#include <limits>
#include <utility>

#include <cooperative_groups.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include "backend/cuda/check.h"
#include "backend/cuda/context.h"
#include "core/error.h"

namespace dsv4::cuda {

// 32-bit narrowing, checked at launch (STYLE.md 6): kernels index with int where the value fits.
inline int narrow_int(int64_t v, const char* what) {
  if (v < 0 || v > std::numeric_limits<int>::max()) fail(what, " = ", v, " does not fit a 32-bit index");
  return int(v);
}

inline int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Whether ptr is 16-byte aligned (vector loads, cp.async of 16 bytes).
inline bool aligned16(const void* ptr) { return (reinterpret_cast<uintptr_t>(ptr) & 15u) == 0; }

// Lets `kernel` launch with up to the device's opt-in shared memory per block (less its static shared
// memory). The attribute is only a cap (occupancy follows each launch's own size), so it is raised to the
// largest value instead of to each call's size: a later call with a smaller size would otherwise lower it
// below a launch already captured in a graph, and replaying that node alone (as ncu does) then fails.
// Returns that cap (the most dynamic shared memory a launch of `kernel` may ask for).
template <typename Kernel>
int allow_max_dynamic_smem(const DeviceContext& ctx, Kernel kernel) {
  cudaFuncAttributes attr{};
  DSV4_CUDA_CHECK(cudaFuncGetAttributes(&attr, kernel));
  const int cap = int(ctx.max_smem_per_block()) - int(attr.sharedSizeBytes);
  DSV4_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, cap));
  return cap;
}

// Programmatic dependent launch (Hopper; docs/cuda.md "Kernel tiers"). A kernel started by launch_pdl
// may begin while the stream's previous kernel still runs: it may only read constant data (weights)
// before grid_dependency_wait(), which returns once the previous kernels have completed and their
// writes are visible. allow_dependents() lets the stream's next kernel, if it was launched that way,
// start its prologue now (a hint: it changes no ordering of memory). Both are no-ops otherwise.
__device__ __forceinline__ void grid_dependency_wait() { asm volatile("griddepcontrol.wait;" ::: "memory"); }
__device__ __forceinline__ void allow_dependents() { asm volatile("griddepcontrol.launch_dependents;"); }
__device__ __forceinline__ void prefetch_l2(const void* ptr) { asm volatile("prefetch.global.L2 [%0];" ::"l"(ptr)); }

// `kernel`<<<grid, block, smem, ctx.stream()>>>(args...) as a programmatic dependent launch, with `cluster`
// consecutive blocks per thread block cluster (0: no cluster). Sizes above the portable 8 (Hopper takes
// 16) are allowed on the kernel first.
template <typename... Params, typename... Args>
void launch_cluster_pdl(const DeviceContext& ctx, void (*kernel)(Params...), dim3 grid, dim3 block, int cluster,
                        size_t smem, Args&&... args) {
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = grid;
  cfg.blockDim = block;
  cfg.dynamicSmemBytes = smem;
  cfg.stream = ctx.stream();
  cudaLaunchAttribute attr[2];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = attr;
  cfg.numAttrs = 1;
  if (cluster > 0) {
    if (cluster > 8) DSV4_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1));
    attr[1].id = cudaLaunchAttributeClusterDimension;
    attr[1].val.clusterDim.x = unsigned(cluster);
    attr[1].val.clusterDim.y = 1;
    attr[1].val.clusterDim.z = 1;
    cfg.numAttrs = 2;
  }
  DSV4_CUDA_CHECK(cudaLaunchKernelEx(&cfg, kernel, std::forward<Args>(args)...));
}

// `kernel`<<<grid, block, smem, ctx.stream()>>>(args...) as a programmatic dependent launch (no cluster).
template <typename... Params, typename... Args>
void launch_pdl(const DeviceContext& ctx, void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem,
                Args&&... args) {
  launch_cluster_pdl(ctx, kernel, grid, block, 0, smem, std::forward<Args>(args)...);
}

// Thread block cluster barriers in two halves (every thread of every block arrives, then waits): an
// arrive.relaxed early and its wait before the first store into another block's shared memory make sure
// that block has started; release / acquire order the stores before the barrier with the loads after.
__device__ __forceinline__ void cluster_arrive_relaxed() { asm volatile("barrier.cluster.arrive.relaxed;" ::: "memory"); }
__device__ __forceinline__ void cluster_arrive() { asm volatile("barrier.cluster.arrive.release;" ::: "memory"); }
__device__ __forceinline__ void cluster_wait() { asm volatile("barrier.cluster.wait.acquire;" ::: "memory"); }
// local[at] = v in the shared memory of every block of the cluster (`local`: this block's copy).
__device__ __forceinline__ void store_in_every_rank(const cooperative_groups::cluster_group& cluster, double* local,
                                                    int64_t at, double v) {
  for (unsigned b = 0; b < cluster.num_blocks(); ++b) cluster.map_shared_rank(local, b)[at] = v;
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ __forceinline__ double warp_sum(double v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
// sum_q f[q] * x[q] over 8 fp32 weights (16-byte aligned) and 8 values, in double: each product of an
// fp32 weight and a bf16 value is exact in double (the mHC mixes; cpu::hc_mixes sums them so).
__device__ __forceinline__ double dot8_f64(const float* f, const float (&x)[8]) {
  const float4 a = reinterpret_cast<const float4*>(f)[0], b = reinterpret_cast<const float4*>(f)[1];
  return double(a.x) * x[0] + double(a.y) * x[1] + double(a.z) * x[2] + double(a.w) * x[3] + double(b.x) * x[4] +
         double(b.y) * x[5] + double(b.z) * x[6] + double(b.w) * x[7];
}
// Eight bf16 values (their bits, the first in the low half of raw.x) as floats.
__device__ __forceinline__ void bf16x8_values(const uint4& raw, float (&v)[8]) {
  const __nv_bfloat162* h = reinterpret_cast<const __nv_bfloat162*>(&raw);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 f = __bfloat1622float2(h[i]);
    v[2 * i] = f.x;
    v[2 * i + 1] = f.y;
  }
}
// Eight consecutive bf16 values (one 16-byte load; p 16-byte aligned) as floats.
__device__ __forceinline__ void load_bf16x8(const __nv_bfloat16* p, float (&v)[8]) {
  bf16x8_values(*reinterpret_cast<const uint4*>(p), v);
}

// The value of an e4m3 code (exact, through half).
__device__ __forceinline__ float e4m3_value(unsigned code) {
  return __half2float(__half(__nv_cvt_fp8_to_halfraw(__nv_fp8_storage_t(code), __NV_E4M3)));
}

// Eight e2m1 nibbles -> two registers of four e4m3 bytes whose values are the e2m1 values x 2^-6: the
// nibble s|e1 e0|m becomes the byte s|0 0 e1 e0|m 0 0 (normal and subnormal alike), 4 logic ops per 8
// values. `lo` from the low nibbles (even k), `hi` from the high nibbles (odd k).
__device__ __forceinline__ void e2m1x8_to_e4m3(uint32_t w, uint32_t& lo, uint32_t& hi) {
  lo = ((w << 4) & 0x80808080u) | ((w << 2) & 0x1c1c1c1cu);
  hi = (w & 0x80808080u) | ((w >> 2) & 0x1c1c1c1cu);
}

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

}  // namespace dsv4::cuda
