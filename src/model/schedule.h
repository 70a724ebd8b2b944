// How a token sequence is fed to the model: one prefill, prefill then one token per step, or chunks.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace dsv4 {

// Parses "full", "decode:P" or "chunks:A,B,..." into the chunk sizes for an input of n tokens.
// decode:P = P tokens then 1 per step; chunk sizes are used in order, the last one repeats until the
// input ends and the final chunk is cut at the end. Throws dsv4::Error on a malformed spec.
std::vector<int64_t> parse_schedule(const std::string& spec, int64_t n);

}  // namespace dsv4
