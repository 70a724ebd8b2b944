// The warp-level tensor-core MMA the register kernels share (device code: include from .cu files only).
#pragma once
#include <cstdint>

namespace dsv4::cuda {

// d += A . B on bf16 pairs, fp32 accumulation (mma.sync.m16n8k16, row.col). Fragments (g = lane / 4,
// t = lane % 4): a0 (row g, k 2t..2t+1), a1 (row g + 8, k 2t..), a2 (row g, k 2t + 8..), a3 (row g + 8,
// k 2t + 8..); b0 (k 2t..2t+1, column g), b1 (k 2t + 8.., column g); d0 d1 (row g, columns 2t, 2t + 1),
// d2 d3 (row g + 8, the same columns). The sum over k is order-free, so a kernel may map any 16 physical
// k onto the 16 slots as long as A and B agree.
__device__ __forceinline__ void mma_bf16_16816(float (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                               uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

// The same with f16 pairs.
__device__ __forceinline__ void mma_f16_16816(float (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                              uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

}  // namespace dsv4::cuda
