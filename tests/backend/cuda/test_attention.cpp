// Sparse decode attention with sinks against cpu::attend_with_sink(round_p = true).
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "backend/cpu/ops.h"
#include "backend/cuda/ops.h"
#include "harness.h"

namespace dsv4::cuda::test {
namespace {

// `missing` of the max_keys slots per query are -1; token `empty_token` (if >= 0) has no key at all.
void check_attention(int64_t tokens, int heads, int dim, int max_keys, int64_t entries, float q_sigma, int missing,
                     int64_t empty_token, uint64_t seed) {
  DeviceContext ctx;
  Rng rng(seed);
  std::vector<float> q = rng.bf16_normal(size_t(tokens * heads * dim), q_sigma);
  std::vector<float> kv = rng.bf16_normal(size_t(entries * dim));
  std::vector<float> sinks = rng.f32_normal(size_t(heads), 1.0f);
  std::vector<int32_t> idx(size_t(tokens * max_keys));
  for (int64_t t = 0; t < tokens; ++t)
    for (int s = 0; s < max_keys; ++s) {
      int32_t e = rng.uniform_int(0, int(entries - 1));
      if (s % std::max(1, max_keys / std::max(1, missing)) == 1 && missing > 0) e = -1;
      if (t == empty_token) e = -1;
      idx[size_t(t * max_keys + s)] = e;
    }
  const float scale = 1.0f / std::sqrt(float(dim));

  auto dq = upload_bf16(q);
  auto dkv = upload_bf16(kv);
  DeviceBuffer<int32_t> didx(idx);
  DeviceBuffer<float> dsinks(sinks);
  Guarded<uint16_t> out(size_t(tokens * heads * dim));
  SparseAttentionParams p;
  p.q = reinterpret_cast<const bf16*>(dq.get());
  p.kv = reinterpret_cast<const bf16*>(dkv.get());
  p.indices = didx.get();
  p.sinks = dsinks.get();
  p.out = reinterpret_cast<bf16*>(out.get());
  p.tokens = tokens;
  p.entries = entries;
  p.heads = heads;
  p.dim = dim;
  p.max_keys = max_keys;
  p.scale = scale;
  sparse_attention(ctx, p);
  ctx.synchronize();

  std::vector<float> ref(size_t(tokens * heads * dim));
  for (int64_t t = 0; t < tokens; ++t) {
    std::vector<const float*> keys;
    for (int s = 0; s < max_keys; ++s)
      if (int32_t e = idx[size_t(t * max_keys + s)]; e >= 0) keys.push_back(&kv[size_t(e) * size_t(dim)]);
    for (int h = 0; h < heads; ++h)
      cpu::attend_with_sink(&q[size_t((t * heads + h) * dim)], keys.data(), int64_t(keys.size()), dim, scale,
                            sinks[size_t(h)], true, &ref[size_t((t * heads + h) * dim)]);
  }
  compare("sparse_attention tokens=" + std::to_string(tokens) + " heads=" + std::to_string(heads) + " dim=" +
              std::to_string(dim) + " keys=" + std::to_string(max_keys) + " q_sigma=" + std::to_string(q_sigma),
          from_bf16(out.download("attention")), round_bf16(ref), Tol::Attention);
}

TEST(CudaAttention, DecodeCsaShape) {
  DSV4_REQUIRE_HOPPER();
  // 128 window keys + 512 selected, 64 heads of 512, some slots empty, one query with no key at all.
  check_attention(3, 64, 512, 640, 5000, 1.0f, 40, 2, 61);
}
TEST(CudaAttention, PeakedLogitsAndBatch) {
  DSV4_REQUIRE_HOPPER();
  check_attention(40, 64, 512, 200, 3000, 3.0f, 0, -1, 62);  // enough tokens for 4 heads per block
  check_attention(1, 8, 128, 37, 100, 1.0f, 3, -1, 63);
}
TEST(CudaAttention, LongHcaKeyList) {
  DSV4_REQUIRE_HOPPER();
  check_attention(2, 64, 512, 8320, 20000, 1.0f, 0, -1, 64);  // window + 8192 compressed entries
}

}  // namespace
}  // namespace dsv4::cuda::test
