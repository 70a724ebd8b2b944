// libFuzzer target: arbitrary bytes as a whole safetensors file. parse_safetensors must either throw
// dsv4::Error or return entries whose byte ranges lie inside the input (ASan checks the reads below).
#include <cstddef>
#include <cstdint>
#include <map>
#include <string>

#include "core/error.h"
#include "io/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::map<std::string, std::string> metadata;
  try {
    auto entries = dsv4::parse_safetensors(data, size, "fuzz.safetensors", &metadata);
    volatile uint8_t sink = 0;
    for (const auto& e : entries) {
      if (e.view.nbytes == 0) continue;
      if (e.view.data < data || e.view.data + e.view.nbytes > data + size) __builtin_trap();
      sink = sink + e.view.data[0] + e.view.data[e.view.nbytes - 1];
    }
    for (size_t i = 1; i < entries.size(); ++i)
      if (!(entries[i - 1].name < entries[i].name)) __builtin_trap();  // the contract: sorted by name
  } catch (const dsv4::Error&) {
  }
  return 0;
}
