// An FP8 block-scaled weight's values as bf16 on the device: y[r, k] = bf16(code[r, k] * scale[r/128, k/128]),
// one fp32 product rounded once (exact for the E8M0 scales of DeepSeek's checkpoints, where every product
// is a bf16 value). The CUDA fast tier holds wo_a as its FP8 codes (attention_sublayer.h) and widens them,
// a few groups at a time, into a bf16 buffer for cuBLASLt's strided batch in calls above fast_gemv's tokens.
// CPU twin: io/weights.h dequantize() then round_bf16 (tests/backend/cuda/test_fp8_dequant.cpp).
#pragma once
#include "backend/cuda/gemm.h"

namespace dsv4::cuda {

// Rows [row0, row0 + rows) (row0 a multiple of 128; rows < 0: to the last) into `y`: device [rows, w.in]
// bf16, 16-byte aligned. One launch on ctx's stream; throws dsv4::Error on an empty weight, a null or
// misaligned y, in % 8 != 0 or a row range outside the weight.
void dequantize_fp8_weight(const DeviceContext& ctx, const Fp8Weight& w, bf16* y, int64_t row0 = 0, int64_t rows = -1);

}  // namespace dsv4::cuda
