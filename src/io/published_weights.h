// The tensors a published checkpoint of a config holds, from the config alone: shapes, dtypes and byte
// sizes in the published formats (FORMATS.md §3.2-3.4: FP8 e4m3 + E8M0 128x128 for the dense projections,
// shared experts and MTP projections, packed FP4 + E8M0 1x32 routed experts, bf16 embed / head / norms /
// router / compressors / indexer weights_proj, fp32 mHC / sinks / ape / bias, I64 tid2eid), as
// bind_weights (io/weights.cpp) lays them out. The views hold no data. Used for the memory plan of a
// `--preset` (io/memory_plan.h) and for `--dummy-weights` (io/dummy_weights.h), which fills them.
#pragma once
#include "io/config.h"
#include "io/weights.h"

namespace dsv4 {

// With `mtp`, also the config's MTP blocks (routed by score, as bind_weights binds them). Throws
// dsv4::Error for a DSpark config with `mtp` (its stages' sizes come from the checkpoint).
Weights published_weights(const ModelConfig& cfg, bool mtp = true);

}  // namespace dsv4
