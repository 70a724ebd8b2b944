// TMA tensor maps (contract in tensor_map.h).
#include "backend/cuda/tensor_map.h"

#include <cudaTypedefs.h>

#include "core/error.h"

namespace dsv4::cuda {

CUtensorMap tensor_map_2d(const DeviceContext& ctx, const void* base, CUtensorMapDataType type, int elem_bytes,
                          int64_t inner, int64_t outer, int64_t row_bytes, int box_inner, int box_outer,
                          CUtensorMapSwizzle swizzle, const char* who, const char* what) {
  const auto encode = reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(ctx.tensor_map_encoder());
  if (!encode) fail(who, ": needs the driver's cuTensorMapEncodeTiled");
  CUtensorMap m{};
  const cuuint64_t dims[2] = {cuuint64_t(inner), cuuint64_t(outer)};
  const cuuint64_t strides[1] = {cuuint64_t(row_bytes)};
  const cuuint32_t box[2] = {cuuint32_t(box_inner), cuuint32_t(box_outer)};
  const cuuint32_t steps[2] = {1, 1};
  const CUresult r = encode(&m, type, 2, const_cast<void*>(base), dims, strides, box, steps, CU_TENSOR_MAP_INTERLEAVE_NONE,
                            swizzle, CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS)
    fail(who, ": cuTensorMapEncodeTiled failed (", int(r), ") for ", what, " [", outer, ", ", inner, "] of ", elem_bytes,
         "-byte elements, row stride ", row_bytes, " bytes, box [", box_outer, ", ", box_inner, "]");
  return m;
}

CUtensorMap bf16_tensor_map_sw128(const DeviceContext& ctx, const void* base, int64_t inner, int64_t outer,
                                  int64_t row_elems, int box_inner, int box_outer, const char* who, const char* what) {
  return tensor_map_2d(ctx, base, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, inner, outer, row_elems * 2, box_inner, box_outer,
                       CU_TENSOR_MAP_SWIZZLE_128B, who, what);
}

}  // namespace dsv4::cuda
