// A checkpoint-style FP8 weight for the linear tests: random e4m3 codes (no NaN) and E8M0 scales near
// 2^-8 per 128 x 128 tile, with its dequantized values (io/weights.h) for the CPU twin.
#pragma once
#include <cstdint>
#include <vector>

#include "core/tensor.h"
#include "harness.h"
#include "io/weights.h"

namespace dsv4::cuda::test {

struct HostFp8 {
  int64_t out, in;
  std::vector<uint8_t> codes, scales;
  TensorView wv() const { return {DType::F8_E4M3, {out, in}, codes.data(), codes.size()}; }
  TensorView sv() const { return {DType::F8_E8M0, {(out + 127) / 128, (in + 127) / 128}, scales.data(), scales.size()}; }
  std::vector<float> dequantized() const {
    LinearWeight lw;
    lw.format = WeightFormat::FP8;
    lw.out = out;
    lw.in = in;
    lw.weight = wv();
    lw.scale = sv();
    return dequantize(lw).data;
  }
};

inline HostFp8 make_fp8(Rng& rng, int64_t out, int64_t in) {
  HostFp8 w{out, in, std::vector<uint8_t>(size_t(out * in)), {}};
  const int64_t ob = (out + 127) / 128, kb = (in + 127) / 128;
  w.scales.resize(size_t(ob * kb));
  for (auto& s : w.scales) s = uint8_t(127 - 8 + rng.uniform_int(-2, 2));
  for (auto& c : w.codes) {
    c = uint8_t(rng.uniform_int(0, 255));
    if ((c & 0x7f) == 0x7f) c ^= 1;  // no NaN codes
  }
  return w;
}

}  // namespace dsv4::cuda::test
