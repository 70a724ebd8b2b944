// What the engine reports about itself: counters, gauges and latency histograms, as a snapshot that
// front ends format (the server as Prometheus text).
#pragma once
#include <cstdint>
#include <vector>

#include "runtime/prefix_cache.h"

namespace dsv4 {

// Cumulative-bucket histogram in the Prometheus sense: counts[i] = observations <= bounds[i];
// the implicit last bucket (+Inf) is `count`.
class Histogram {
 public:
  explicit Histogram(std::vector<double> bounds);
  void observe(double v);
  const std::vector<double>& bounds() const { return bounds_; }
  const std::vector<uint64_t>& counts() const { return counts_; }
  uint64_t count() const { return count_; }
  double sum() const { return sum_; }

 private:
  std::vector<double> bounds_;
  std::vector<uint64_t> counts_;
  uint64_t count_ = 0;
  double sum_ = 0;
};

struct EngineStats {
  // Counters since start.
  uint64_t requests_submitted = 0;
  uint64_t requests_rejected = 0;   // the queue was full, or the engine was stopping
  uint64_t finished_stop = 0, finished_length = 0;
  uint64_t requests_cancelled = 0;  // by the client, or at shutdown
  uint64_t prompt_tokens = 0, generated_tokens = 0;  // prefilled prompts; every token sampled (not stop ids)
  uint64_t steps = 0;
  // Gauges.
  int64_t queued = 0, running = 0;
  int64_t last_step_sequences = 0, last_step_tokens = 0;
  int64_t cache_pages_used = 0, cache_pages_total = 0, cache_page_tokens = 0;
  int64_t max_num_seqs = 0;
  // The prefix cache (EngineOptions::prefix_cache_bytes; all zero when off): lookups, hits, hit / miss
  // tokens, inserts, evictions since start; bytes, entries and the budget now.
  bool prefix_cache = false;
  PrefixCacheStats prefix;
  uint64_t prefix_snapshot_errors = 0;  // snapshots that failed (the request went on, uncached)
  // Speculative decoding (EngineOptions::speculative; all zero when off), counters since start over the
  // speculative sequences: verify steps (rounds with drafts), drafts proposed and accepted, tokens the
  // rounds emitted (accepted drafts and one target token per round, fewer where a stop id cut it:
  // spec_tokens <= spec_accepted + spec_verify_steps), steps without a draft (the limit or the context).
  int64_t speculative = 0;  // k (drafts per verify step), 0: off
  uint64_t spec_verify_steps = 0, spec_draft_tokens = 0, spec_accepted_tokens = 0, spec_tokens = 0;
  uint64_t spec_plain_steps = 0;
  double spec_acceptance() const { return spec_draft_tokens ? double(spec_accepted_tokens) / double(spec_draft_tokens) : 0; }
  // Histograms (seconds; sequences per step).
  Histogram ttft{{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60}};
  Histogram inter_token{{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5}};
  Histogram request_latency{{0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300}};
  Histogram batch_size{{1, 2, 4, 8, 16, 32, 64, 128, 256}};
};

}  // namespace dsv4
