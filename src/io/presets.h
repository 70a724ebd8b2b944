// Published DeepSeek-V4 shapes without a checkpoint (`--preset flash|pro`), and truncation of the layer
// stack (`--layers N`) so that a benchmark fits one GPU. Numbers: shared/docs/FORMATS.md §2.1-2.2.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "io/config.h"

namespace dsv4 {

// The names preset_config accepts: "flash", "pro".
std::vector<std::string> preset_names();
// The config.json text of a preset (legacy form, as published). Throws dsv4::Error on an unknown name.
std::string preset_config_json(const std::string& name);
// The parsed preset; config.source is "preset:<name>".
ModelConfig preset_config(const std::string& name);
// Keeps the first n layers of the main stack (and their layer specs); MTP blocks are dropped.
// Throws dsv4::Error unless 1 <= n <= cfg.num_layers.
void truncate_layers(ModelConfig& cfg, int64_t n);

}  // namespace dsv4
