// Reads a request's events from the engine until it finishes: the generated ids (test helper).
#pragma once
#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <vector>

#include "runtime/engine_channel.h"

namespace dsv4::test {

inline std::vector<int32_t> collect_ids(RequestChannel& ch) {
  using namespace std::chrono_literals;
  std::vector<int32_t> ids;
  const auto deadline = std::chrono::steady_clock::now() + 120s;
  while (std::chrono::steady_clock::now() < deadline)
    for (const EngineEvent& e : ch.wait(100ms)) {
      if (e.kind == EngineEvent::Kind::Token) ids.push_back(e.id);
      if (e.kind == EngineEvent::Kind::Finished) return ids;
      if (e.kind == EngineEvent::Kind::Failed) {
        ADD_FAILURE() << "failed: " << e.text;
        return ids;
      }
    }
  ADD_FAILURE() << "no final event";
  return ids;
}

}  // namespace dsv4::test
