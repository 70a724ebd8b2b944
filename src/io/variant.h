// Which member of the DeepSeek-V4 family a checkpoint is (FORMATS.md section 1), read from the bound
// weights and the config: shape family, routed-expert format per layer, MTP / DSpark blocks. For
// `dsv4 inspect` and for messages; nothing in the forward pass branches on these names.
#pragma once
#include <optional>
#include <string>

#include "io/config.h"
#include "io/weights.h"

namespace dsv4 {

// The format all routed experts of a block share; nullopt when the block has none or they are mixed.
std::optional<WeightFormat> expert_format(const BlockWeights& b);

// One line, e.g. "V4-Flash shape, routed experts NVFP4 (ModelOpt), 3 DSpark stages (0731 / 0813 layout)".
std::string variant_name(const ModelConfig& cfg, const Weights& w);

}  // namespace dsv4
