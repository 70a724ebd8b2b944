// /metrics: the engine's statistics and the server's own request counters as Prometheus text
// (exposition format 0.0.4). Names start with dsv4_.
#pragma once
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <utility>

#include "runtime/engine_metrics.h"

namespace dsv4::server {

// HTTP requests answered, per route and status, and the responses being streamed now.
class HttpCounters {
 public:
  using Counts = std::map<std::pair<std::string, int>, uint64_t>;
  void count(const std::string& route, int status);
  Counts snapshot() const;
  void stream_started();
  void stream_ended();
  int64_t active_streams() const;

 private:
  mutable std::mutex mu_;
  Counts counts_;
  int64_t active_ = 0;
};

std::string render_metrics(const EngineStats& s, const HttpCounters::Counts& http, int64_t active_streams,
                           const std::string& model_name);

}  // namespace dsv4::server
