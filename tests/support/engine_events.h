// Reads a request's events from the engine until it finishes: the generated ids; prompts of token ids
// (test helpers).
#pragma once
#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <vector>

#include "runtime/engine_channel.h"

namespace dsv4::test {

// n ids of the vocabulary, distinct per seed.
inline std::vector<int32_t> token_ids(int64_t n, int32_t seed, int64_t vocab) {
  std::vector<int32_t> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[size_t(i)] = int32_t((seed * 7919 + 31 * i + i * i) % vocab);
  return v;
}

// `cached`: the prompt tokens the request restored from the prefix cache (its final event's).
inline std::vector<int32_t> collect_ids(RequestChannel& ch, int64_t* cached = nullptr) {
  using namespace std::chrono_literals;
  std::vector<int32_t> ids;
  const auto deadline = std::chrono::steady_clock::now() + 120s;
  while (std::chrono::steady_clock::now() < deadline)
    for (const EngineEvent& e : ch.wait(100ms)) {
      if (e.kind == EngineEvent::Kind::Token) ids.push_back(e.id);
      if (e.kind == EngineEvent::Kind::Finished) {
        if (cached) *cached = e.cached_tokens;
        return ids;
      }
      if (e.kind == EngineEvent::Kind::Failed) {
        ADD_FAILURE() << "failed: " << e.text;
        return ids;
      }
    }
  ADD_FAILURE() << "no final event";
  return ids;
}

}  // namespace dsv4::test
