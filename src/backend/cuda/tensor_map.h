// TMA tensor maps of row-major matrices (bf16 in the 128-byte swizzle that smem_desc_sw128 describes to
// wgmma; raw words without a swizzle), encoded on the host through the driver's cuTensorMapEncodeTiled
// (DeviceContext::tensor_map_encoder) and passed to kernels by value (a __grid_constant__ parameter:
// graph-capturable).
#pragma once
#include <cuda.h>

#include <cstdint>

#include "backend/cuda/context.h"

namespace dsv4::cuda {

// A 2-D map over [outer, inner] elements of `type` (elem_bytes each) whose rows are row_bytes apart, box
// {box_inner, box_outer}, loads past the matrix zero-filled (the transaction still counts the whole box).
// A load's box must start at a 16-byte-aligned address (inner coordinate x elem_bytes a multiple of 16),
// or the kernel dies with an illegal instruction. Throws naming `who` and `what` when the driver refuses
// (base not 16-byte aligned, row_bytes not a multiple of 16, box_inner * elem_bytes not a multiple of 16
// or past the swizzle's span, a box side past 256).
CUtensorMap tensor_map_2d(const DeviceContext& ctx, const void* base, CUtensorMapDataType type, int elem_bytes,
                          int64_t inner, int64_t outer, int64_t row_bytes, int box_inner, int box_outer,
                          CUtensorMapSwizzle swizzle, const char* who, const char* what);

// The same over bf16 elements whose rows are row_elems apart, in the 128-byte swizzle (box_inner * 2 bytes
// <= 128: one swizzled row).
CUtensorMap bf16_tensor_map_sw128(const DeviceContext& ctx, const void* base, int64_t inner, int64_t outer,
                                  int64_t row_elems, int box_inner, int box_outer, const char* who, const char* what);

}  // namespace dsv4::cuda
