// FP8 / NVFP4 routed-expert stacks (contract in moe_expert_stack.h).
#include "backend/cuda/moe_expert_stack.h"

#include <cmath>
#include <cstring>

#include "backend/cuda/fp4_tiled.h"
#include "core/dtype.h"
#include "core/error.h"

namespace dsv4::cuda {
namespace {

void check_shape(const LinearWeight& w, int64_t rows, int64_t K) {
  if (w.out != rows || w.in != K) fail(w.name, ": shape [", w.out, ", ", w.in, "], expected [", rows, ", ", K, "]");
}

bool power_of_two(float v) {
  int e;
  return std::isfinite(v) && v > 0 && std::frexp(v, &e) == 0.5f;
}

}  // namespace

ExpertStack upload_expert_stack(const std::vector<std::vector<const LinearWeight*>>& parts, int64_t part_rows,
                                int64_t K, bool fast_layout) {
  ExpertStack s;
  s.fast_layout = fast_layout;
  if (parts.empty() || parts[0].empty()) return s;
  const LinearWeight& first = *parts[0][0];
  if (first.format != WeightFormat::FP8 && first.format != WeightFormat::NVFP4)
    fail(first.name, ": expected FP8 or NVFP4 routed experts here, got ", weight_format_name(first.format));
  if (part_rows % 128 != 0 || K % 128 != 0) fail(first.name, ": rows ", part_rows, " and K ", K, " must be multiples of 128");
  s.format = first.format;
  s.E = int64_t(parts.size());
  const int64_t np = int64_t(parts[0].size());
  s.rows = np * part_rows;
  s.K = K;
  const bool fp8 = s.format == WeightFormat::FP8;
  const int64_t kb = (K + 127) / 128, rows_all = s.E * s.rows;
  std::vector<uint8_t> codes(size_t(rows_all * (fp8 ? K : K / 2)));
  std::vector<float> tiles, globals;
  std::vector<uint8_t> blocks;
  if (fp8) tiles.resize(size_t(rows_all / 128 * kb));
  else blocks.resize(size_t(rows_all * K / 16));
  for (int64_t e = 0; e < s.E; ++e) {
    if (int64_t(parts[size_t(e)].size()) != np) fail(first.name, ": experts stack different numbers of projections");
    for (int64_t p = 0; p < np; ++p) {
      const LinearWeight& w = *parts[size_t(e)][size_t(p)];
      if (w.format != s.format)
        fail(w.name, ": ", weight_format_name(w.format), " beside ", weight_format_name(s.format), " in '", first.name,
             "': the GPU needs one format per projection across a layer's routed experts");
      check_shape(w, part_rows, K);
      const int64_t r0 = e * s.rows + p * part_rows;  // first row of this part in the stack
      if (fp8) {
        if (w.weight.nbytes != size_t(part_rows * K)) fail(w.name, ": unexpected FP8 byte size");
        if (fast_layout) pack_fp8_tiled(w.weight.data, part_rows, K, codes.data() + r0 * K);  // 16-row tiles: parts concatenate
        else std::memcpy(codes.data() + r0 * K, w.weight.data, size_t(part_rows * K));
        const int64_t ob = part_rows / 128;
        if (w.scale.shape != Shape{ob, kb})
          fail(w.name, ": scale shape ", shape_str(w.scale.shape), ", expected ", shape_str(Shape{ob, kb}));
        if (w.scale.dtype != DType::F8_E8M0 && w.scale.dtype != DType::F32)
          fail(w.name, ": scale dtype ", dtype_name(w.scale.dtype), ", expected F8_E8M0 or F32");
        float* dst = tiles.data() + r0 / 128 * kb;
        to_f32(w.scale.dtype, w.scale.data, 0, size_t(ob * kb), dst);
        for (int64_t i = 0; i < ob * kb; ++i) s.pow2_scales = s.pow2_scales && power_of_two(dst[i]);
      } else {
        if (w.weight.nbytes != size_t(part_rows * K / 2) || w.scale.nbytes != size_t(part_rows * K / 16) ||
            w.scale.dtype != DType::F8_E4M3)
          fail(w.name, ": unexpected NVFP4 sizes (codes [", part_rows, ", ", K / 2, "] U8, weight_scale [", part_rows,
               ", ", K / 16, "] F8_E4M3)");
        if (fast_layout) pack_fp4_tiled(w.weight.data, part_rows, K, codes.data() + r0 * K / 2);
        else std::memcpy(codes.data() + r0 * K / 2, w.weight.data, size_t(part_rows * K / 2));
        std::memcpy(blocks.data() + r0 * K / 16, w.scale.data, size_t(part_rows * K / 16));
        globals.push_back(nvfp4_global_scale(w));
      }
    }
  }
  s.codes = DeviceBuffer<uint8_t>(codes);
  if (fp8) {
    s.tile_scales = DeviceBuffer<float>(tiles);
  } else {
    s.block_scales = DeviceBuffer<uint8_t>(blocks);
    s.global = DeviceBuffer<float>(globals);
    s.global_rows = part_rows;
  }
  return s;
}

ExactLinearParams expert_stack_params(const ExpertStack& s, const int32_t* expert_ids) {
  if (!s.present()) fail("expert_stack_params: no stack uploaded");
  if (s.fast_layout) fail("expert_stack_params: the stack is in the fast tier's tiled layout (exact_linear reads the checkpoint layout)");
  ExactLinearParams p;
  p.expert_ids = expert_ids;
  p.out = int(s.rows);
  p.in = int(s.K);
  if (s.format == WeightFormat::FP8) {
    const int64_t kb = (s.K + 127) / 128;
    p.w8 = s.codes.get();
    p.w_scales = s.tile_scales.get();
    p.w_scale_ld = kb;
    p.w_expert_stride = s.rows * s.K;
    p.ws_expert_stride = s.rows / 128 * kb;
    if (!s.pow2_scales) p.kernel = ExactLinearKernel::Tiled;
  } else {
    p.w4 = s.codes.get();
    p.w4_scales = s.block_scales.get();
    p.w4_global = s.global.get();
    p.w4_global_rows = int(s.global_rows);
    p.w_expert_stride = s.rows * s.K / 2;
    p.ws_expert_stride = s.rows * s.K / 16;
  }
  return p;
}

Fp4GroupedDecodeParams fast_stack_params(const ExpertStack& s) {
  if (!s.present() || !s.fast_layout) fail("fast_stack_params: no stack in the fast tier's layout uploaded");
  Fp4GroupedDecodeParams p;
  p.out = s.rows;
  p.K = s.K;
  p.w = s.codes.get();
  if (s.format == WeightFormat::FP8) {
    p.format = GroupedWeightFormat::Fp8;
    p.w_tile_scales = s.tile_scales.get();
  } else {
    p.format = GroupedWeightFormat::Nvfp4;
    p.w_scales = s.block_scales.get();
    p.w_global = s.global.get();
    p.global_rows = s.global_rows;
  }
  return p;
}

}  // namespace dsv4::cuda
