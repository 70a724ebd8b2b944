// The frequencies of a RoPE table from the config (MODEL.md §5): theta^(-2i/dim) in fp32, optionally
// blended by YaRN (no mscale). Both backends rotate with these values (tests/io/test_rope_freq.cpp).
#pragma once
#include <cstdint>
#include <vector>

#include "io/config.h"

namespace dsv4 {

std::vector<float> rope_inv_freq(int64_t rope_dim, const RopeConfig& r);

}  // namespace dsv4
