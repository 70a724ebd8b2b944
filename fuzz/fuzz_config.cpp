// libFuzzer target: arbitrary text as config.json. parse_config must either throw dsv4::Error or return
// a config that keeps the invariants the model code relies on.
#include <cstddef>
#include <cstdint>
#include <string>

#include "core/error.h"
#include "io/config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  try {
    const dsv4::ModelConfig c = dsv4::parse_config(text, "fuzz/config.json");
    bool ok = int64_t(c.layers.size()) == c.num_layers && c.rope_dim > 0 && c.rope_dim % 2 == 0 &&
              c.rope_dim <= c.head_dim && c.num_heads % c.o_groups == 0 && c.experts_per_tok <= c.n_routed_experts;
    for (const auto& l : c.layers)
      ok = ok && (l.attn == dsv4::AttnKind::Sliding ? l.ratio == 0
                  : l.attn == dsv4::AttnKind::CSA   ? l.ratio == 4
                                                    : l.ratio >= 8);
    if (!ok) __builtin_trap();
  } catch (const dsv4::Error&) {
  }
  return 0;
}
