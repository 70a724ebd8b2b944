// Hopper warpgroup MMA (wgmma, sm_90a) helpers shared by the tensor-core kernels that feed A fragments
// (e4m3, f16 or bf16) from registers and B from shared memory (fp4_grouped_mma, fp4_grouped_decode,
// linear_stream), or both operands from shared memory (gemm_tma). Device code: include from .cu files only.
#pragma once
#include <cooperative_groups.h>

#include <cstdint>

#include "backend/cuda/async_copy.cuh"  // smem_u32

namespace dsv4::cuda {

__device__ __forceinline__ uint32_t word_of(const uint4& v, int i) {
  return i == 0 ? v.x : i == 1 ? v.y : i == 2 ? v.z : v.w;
}

// Shared-memory matrix descriptor, no swizzle (layout type 0, base offset 0): lbo = byte step between
// the two 16-byte core matrices of a 32-k slice (K direction), sbo = byte step between 8-row groups.
__device__ __forceinline__ uint64_t smem_desc(const void* p, uint32_t lbo, uint32_t sbo) {
  uint64_t d = uint64_t((smem_u32(p) & 0x3FFFFu) >> 4);
  d |= uint64_t((lbo >> 4) & 0x3FFFu) << 16;
  d |= uint64_t((sbo >> 4) & 0x3FFFu) << 32;
  return d;
}

// Compiler fences: keep an accumulator or an A register live (and unmoved) across an asynchronous MMA.
__device__ __forceinline__ void fence_f32(float& x) { asm volatile("" : "+f"(x)::"memory"); }
__device__ __forceinline__ void fence_u32(uint32_t& x) { asm volatile("" : "+r"(x)::"memory"); }

__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory"); }
// Waits until at most N committed wgmma groups of this warpgroup are in flight.
template <int N>
__device__ __forceinline__ void wgmma_wait() { asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(N) : "memory"); }

// d[64 x N] (+)= A[64 x 32] (registers, e4m3) * B[32 x N] (shared, e4m3, K-major); `accumulate` false
// writes the product alone (scale-d = 0). Fragment element j of a thread: row 16 warp + lane / 4 + 8 ((j / 2) % 2),
// column 8 (j / 4) + 2 (lane % 4) + j % 2.
template <int N>
__device__ __forceinline__ void wgmma_rs(float (&d)[N / 2], const uint32_t (&a)[4], uint64_t desc, bool accumulate);

template <>
__device__ __forceinline__ void wgmma_rs<8>(float (&d)[4], const uint32_t (&a)[4], uint64_t desc, bool accumulate) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %9, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n8k32.f32.e4m3.e4m3 {%0, %1, %2, %3}, {%4, %5, %6, %7}, %8, p, 1, 1;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc), "r"(int(accumulate)));
}
template <>
__device__ __forceinline__ void wgmma_rs<16>(float (&d)[8], const uint32_t (&a)[4], uint64_t desc, bool accumulate) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %13, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n16k32.f32.e4m3.e4m3 {%0, %1, %2, %3, %4, %5, %6, %7}, "
      "{%8, %9, %10, %11}, %12, p, 1, 1;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc), "r"(int(accumulate)));
}
// d[64 x N] (+)= A[64 x 16] (registers, f16) * B[16 x N] (shared, f16, K-major): fp32 accumulation (the
// FP8 MMAs above keep fewer bits). A register r of a thread: row 16 warp + lane / 4 + 8 (r % 2), k 2 (lane % 4)
// + 8 (r / 2) and the next (low half first); d as above.
template <int N>
__device__ __forceinline__ void wgmma_rs_f16(float (&d)[N / 2], const uint32_t (&a)[4], uint64_t desc, bool accumulate);

template <>
__device__ __forceinline__ void wgmma_rs_f16<8>(float (&d)[4], const uint32_t (&a)[4], uint64_t desc, bool accumulate) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %9, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n8k16.f32.f16.f16 {%0, %1, %2, %3}, {%4, %5, %6, %7}, %8, p, 1, 1, 0;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc), "r"(int(accumulate)));
}
template <>
__device__ __forceinline__ void wgmma_rs_f16<16>(float (&d)[8], const uint32_t (&a)[4], uint64_t desc, bool accumulate) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %13, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n16k16.f32.f16.f16 {%0, %1, %2, %3, %4, %5, %6, %7}, "
      "{%8, %9, %10, %11}, %12, p, 1, 1, 0;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc), "r"(int(accumulate)));
}
template <>
__device__ __forceinline__ void wgmma_rs_f16<32>(float (&d)[16], const uint32_t (&a)[4], uint64_t desc, bool accumulate) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %21, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n32k16.f32.f16.f16 "
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}, "
      "{%16, %17, %18, %19}, %20, p, 1, 1, 0;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
        "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc), "r"(int(accumulate)));
}

// d[64 x 64] (+)= A[64 x 16] (registers, bf16) * B[16 x 64] (shared, bf16, K-major), fp32 accumulation; the
// fragments as wgmma_rs_f16's.
__device__ __forceinline__ void wgmma_rs_bf16_n64(float (&d)[32], const uint32_t (&a)[4], uint64_t desc, bool accumulate) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 "
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, "
      "{%32, %33, %34, %35}, %36, p, 1, 1, 0;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
        "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
        "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
        "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc), "r"(int(accumulate)));
}

// Shared-memory matrix descriptor of a K-major operand in the 128-byte swizzle (layout type 1): rows of
// 128 bytes (64 bf16 of K) as TMA's SWIZZLE_128B writes them, 8-row atoms of 1,024 bytes (SBO), the tile
// 1,024-byte aligned; the k16 step kk of a row starts at p + 32 kk.
__device__ __forceinline__ uint64_t smem_desc_sw128(const void* p) {
  uint64_t d = uint64_t((smem_u32(p) & 0x3FFFFu) >> 4);
  d |= uint64_t(1) << 16;                 // LBO (unused for a swizzled K-major operand)
  d |= uint64_t(1024 >> 4) << 32;         // SBO
  d |= uint64_t(1) << 62;                 // SWIZZLE_128B
  return d;
}
// The descriptor of the operand `bytes` past the one of d (bytes a multiple of 16, the sum inside shared
// memory): one add to the low word (the start address field, 14 bits, cannot carry out of it).
__device__ __forceinline__ uint64_t smem_desc_add(uint64_t d, uint32_t bytes) {
  return (d & 0xFFFFFFFF00000000ull) | uint32_t(uint32_t(d) + (bytes >> 4));
}

// d[64 x N] (+)= A[64 x 16] (shared, bf16, K-major) * B[16 x N] (shared, bf16, K-major), fp32 accumulation:
// both operands through descriptors (smem_desc_sw128). `accumulate` false writes the product alone. d as
// wgmma_rs's (row 16 warp + lane / 4 + 8 ((j / 2) % 2), column 8 (j / 4) + 2 (lane % 4) + j % 2).
template <int N>
__device__ __forceinline__ void wgmma_ss_bf16(float (&d)[N / 2], uint64_t da, uint64_t db, bool accumulate);

template <>
__device__ __forceinline__ void wgmma_ss_bf16<16>(float (&d)[8], uint64_t da, uint64_t db, bool accumulate) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %10, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n16k16.f32.bf16.bf16 {"
      "%0, %1, %2, %3, %4, %5, %6, %7}, "
      "%8, %9, p, 1, 1, 0, 0;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7])
      : "l"(da), "l"(db), "r"(int(accumulate)));
}

template <>
__device__ __forceinline__ void wgmma_ss_bf16<32>(float (&d)[16], uint64_t da, uint64_t db, bool accumulate) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %18, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n32k16.f32.bf16.bf16 {"
      "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}, "
      "%16, %17, p, 1, 1, 0, 0;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
        "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15])
      : "l"(da), "l"(db), "r"(int(accumulate)));
}

template <>
__device__ __forceinline__ void wgmma_ss_bf16<64>(float (&d)[32], uint64_t da, uint64_t db, bool accumulate) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {"
      "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, "
      "%32, %33, p, 1, 1, 0, 0;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
        "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
        "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
        "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
      : "l"(da), "l"(db), "r"(int(accumulate)));
}

template <>
__device__ __forceinline__ void wgmma_ss_bf16<128>(float (&d)[64], uint64_t da, uint64_t db, bool accumulate) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {"
      "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
      "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
      "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, "
      "%64, %65, p, 1, 1, 0, 0;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
        "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
        "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
        "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
        "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),
        "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
        "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
        "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
      : "l"(da), "l"(db), "r"(int(accumulate)));
}

// The end of a K split over a thread block cluster of `splits` CTAs of two warpgroups (256 threads, 128
// rows, N columns each; this CTA is rank `split`): each thread's m64nN fragment `acc` (two warpgroups: row
// 16 warp + lane / 4 + 8 ((j / 2) % 2), column 8 (j / 4) + 2 (lane % 4) + j % 2) goes to `part` (128 N
// floats of this CTA's shared memory, idle by now: the CTA synchronizes first), then rank `split` adds
// rows split * 128 / splits .. of every rank in rank order (deterministic) and calls store(row, col, sum).
template <int N, typename Store>
__device__ __forceinline__ void cluster_split_sum(const float (&acc)[N / 2], float* part, int split, int splits,
                                                  Store&& store) {
  const int tid = int(threadIdx.x), warp = tid / 32, g = (tid % 32) / 4, t = tid % 4;
  __syncthreads();  // every warp is done with what `part` overlays
#pragma unroll
  for (int j = 0; j < N / 2; ++j) part[(warp * 16 + g + 8 * ((j >> 1) & 1)) * N + 8 * (j >> 2) + 2 * t + (j & 1)] = acc[j];
  cooperative_groups::cluster_group cluster = cooperative_groups::this_cluster();
  cluster.sync();
  const int rows_per = 128 / splits;
  for (int idx = tid; idx < rows_per * N; idx += int(blockDim.x)) {
    const int row = split * rows_per + idx / N, col = idx % N;
    float sum = 0.0f;
    for (int r = 0; r < splits; ++r) sum += cluster.map_shared_rank(part, unsigned(r))[row * N + col];
    store(row, col, sum);
  }
  cluster.sync();  // no rank leaves while another reads its partials
}

}  // namespace dsv4::cuda
