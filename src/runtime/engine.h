// The engine: continuous batching over one Model. A scheduler thread owns the model; requests join
// and leave between steps. Each step runs a mix of prefill chunks and one decode token per running
// sequence under a per-step token budget (engine_schedule.h); admission is bounded by the number of
// sequences and by a pool of cache pages that every sequence reserves for its whole context; requests
// that do not fit wait in a queue, and are refused when the queue is full too. Each request streams
// its events through its own channel (engine_channel.h); cancelling a channel frees the sequence
// before the next step.
//
// The model is driven by a Runner (runtime/runner.h): each sequence holds one of its slots while it
// runs; a step's decode tokens (one per decoding sequence) go through ONE Runner::decode call (one
// Model::step of run length 1), then the prefill chunks, one Runner call per chunk (the head only on a
// prompt's last chunk).
//
// Sampling: the runner draws each row where Runner::on_backend says: the backend's sampler for a
// request without penalties and logprobs (Philox(seed, step), step = tokens the request generated
// before; a grammar's mask goes with the row; only the ids come back), else the request's Sampler on
// the logits (penalties, logprobs; mt19937 seeded once).
//
// Prefix cache (EngineOptions::prefix_cache_bytes > 0; runtime/prefix_reuse.h, docs/server.md "Prefix
// cache"): once a request has its slot, its prompt is looked up and a cached prefix is restored into the
// slot (Runner::resume_at), so its prefill starts after it; its prefill chunks also end at the prompt's
// snapshot points, and after a chunk that ends at one the slot is snapshotted into the cache. The ids
// are those of a run without the cache (the state restored is the state computed). Over data-parallel
// ranks the cache has a place per rank and a request goes to the rank holding its longest cached prefix
// unless that rank is much busier (place_sequence, engine_schedule.h).
//
// Speculative decoding (EngineOptions::speculative = k > 0; runtime/speculative.h, docs/speculative.md
// "In the engine"): every prefill also feeds the MTP block (the prefix cache's entries then carry it);
// a request whose sampling it can take (no penalties, no grammar, no logprobs) decodes in rounds: its
// lane drafts up to k tokens (fewer near its max_tokens or the context end) and one verify checks them;
// the step's speculative lanes run ONE round together (runtime/speculative.h speculative_round: a call
// per draft depth over the lanes, a verify call per draft length), the other requests decode as above.
// Over data-parallel ranks every rank's lanes run their round on that rank, all ranks at once, their
// calls paired into one schedule (Runner::together: a rank idles with 0 tokens in a step whose kind it does
// not need); a lane's prefill chunks with the MTP feed run on its rank, the others mirroring its calls
// (Runner::mirrored).
// Greedy output is plain greedy output token for token; sampled output follows the same distribution
// (other draws: the decoder's Philox counters, 4 g + purpose).
//
// The engine knows nothing of HTTP or chat: it takes token ids and returns token ids and text.
#pragma once
#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "backend/exact_tier.h"
#include "core/error.h"
#include "model/model.h"
#include "runtime/engine_channel.h"
#include "runtime/engine_metrics.h"
#include "runtime/engine_schedule.h"
#include "runtime/generate.h"
#include "runtime/prefix_cache.h"
#include "runtime/sampler.h"
#include "runtime/runner.h"
#include "runtime/speculative.h"
#include "tokenizer/tokenizer.h"

namespace dsv4 {

// The default step: prefill chunks of 2,048 tokens (past 512 per call the GPU's grouped tensor-core kernels
// run: 2.7x the prefill rate of 256-token calls, docs/perf-log.md 2026-12-06) and room for 512 decodes beside one.
inline constexpr int64_t kDefaultPrefillChunk = 2048;
inline constexpr int64_t kDefaultStepDecodeRoom = 512;
// The call size of the exact tier on cuda: the most tokens whose kernels are bit-identical to the CPU
// (backend/exact_tier.h; the commands reach the backend's contract through the runtime).
inline constexpr int64_t kExactTierCallTokens = kExactTierMaxCallTokens;

struct EngineOptions {
  int max_num_seqs = 16;          // sequences running at once
  int64_t max_step_tokens = kDefaultPrefillChunk + kDefaultStepDecodeRoom;  // decode + prefill tokens per step
  int64_t prefill_chunk = kDefaultPrefillChunk;  // prefill is cut at multiples of this (capped by max_step_tokens)
  int64_t max_context = 0;        // 0: the model's max_position_embeddings
  int64_t cache_tokens = 0;       // cache pool size in tokens; 0: max_num_seqs full contexts
  int64_t cache_page_tokens = 128;
  int max_queue = 256;            // requests waiting beyond the running ones; more are refused
  // Tokens a request may generate (0: up to the end of the context). A request that gives no
  // max_tokens generates up to this many, and one asking for more is cut here (finish Length): the
  // reservation in the cache follows, so no request holds a whole context unasked.
  int64_t max_tokens_limit = 0;
  // Bytes of slot snapshots the prefix cache holds (its budget, evicting least recently used; over
  // data-parallel ranks, each rank's); 0: no prefix cache. `dsv4 serve` turns it on (--prefix-cache-mib, --no-prefix-cache).
  uint64_t prefix_cache_bytes = 0;
  // Drafts per verify step of speculative decoding, 1 to 3 (0: off); the model needs an MTP block.
  // `dsv4 serve --speculative k`.
  int64_t speculative = 0;
};

struct GenerationRequest {
  std::vector<int32_t> prompt;
  SamplingParams sampling;
  StopConditions stop;    // max_tokens <= 0: up to the end of the context or max_tokens_limit
  int top_logprobs = -1;  // -1: none; 0: the chosen token's; N: also the N most likely
};

// Why submit() refused a request: Invalid (empty prompt, unknown token ids), TooLong (prompt + tokens
// to generate exceed the context or the whole cache), Overloaded (the queue is full), Stopping (the
// engine is shutting down).
class RequestRejected : public Error {
 public:
  enum class Reason { Invalid, TooLong, Overloaded, Stopping };
  RequestRejected(Reason r, const std::string& msg) : Error(msg), reason(r) {}
  Reason reason;
};

class Engine {
 public:
  // `runner` (or `model`) and `tok` must outlive the engine. Starts the scheduler thread. The Model form
  // runs on a Runner of it; the runner must hold at least opt.max_num_seqs sequences.
  Engine(Model& model, const Tokenizer& tok, EngineOptions opt = {});
  Engine(Runner& runner, const Tokenizer& tok, EngineOptions opt = {});
  ~Engine();  // shutdown(0)
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  const EngineOptions& options() const { return opt_; }
  int64_t max_context() const { return max_context_; }

  // Validates and queues the request; its events arrive on the returned channel. Throws RequestRejected.
  std::shared_ptr<RequestChannel> submit(GenerationRequest req);

  // Stops taking requests; queued ones that cannot start at the next step are failed at once
  // (FailReason::ShuttingDown); the running ones may finish for up to `grace`, then the rest are failed
  // the same way and the scheduler is joined. Idempotent.
  void shutdown(std::chrono::milliseconds grace);

  EngineStats stats() const;
  PrefixCache* prefix_cache() { return prefix_.get(); }  // null when off (tests: clear, stats)

 private:
  struct Pending;
  struct Sequence;
  Engine(std::unique_ptr<Runner> owned, Runner* runner, const Tokenizer& tok, EngineOptions opt);
  void loop();
  void retire();
  void admit(std::vector<Pending>& admitted);
  // With a prefix cache over bounded KV page pools (the GPU's): evicts cached snapshots of each rank,
  // oldest first, until its pool's free pages cover what its running and `fresh` sequences may still take.
  void reclaim_pages(const std::vector<std::unique_ptr<Sequence>>& fresh);
  // The data-parallel rank a new request with `prompt` goes to (-1: the runner's choice).
  int place(const std::vector<int32_t>& prompt) const;
  void run_step(uint64_t step);
  void snapshot_prefix(Sequence& s);  // after a prefill chunk (prefix cache)
  // A prefill chunk of a sequence of a speculative engine (its lane keeps the streams, the MTP block
  // follows); `last`: the prompt's last chunk (the first token is drawn).
  void prefill_lane(Sequence& s, const std::vector<int32_t>& chunk, bool last, Draw& d);
  void speculative_step(const std::vector<Sequence*>& seqs);  // one round of these sequences' lanes
  void take(Sequence& s, Draw& d);  // the drawn id (or the Sampler's failure) to the request
  void finish(Sequence& s, FinishReason why, int32_t stop_id);
  // A running sequence's last event (finished or failed). Its pages and its place in the running gauge
  // are given back before the event goes out: a client that has its reply and reads /metrics at once
  // sees the sequence gone. The slot itself is freed when the step retires the sequence.
  void conclude(Sequence& s, EngineEvent ev);
  void fail_all(std::deque<Pending>& queued);  // at shutdown: every request still there
  void update_gauges(int64_t queued);

  std::unique_ptr<Runner> owned_;  // the Runner of the Model form
  Runner& runner_;
  const Tokenizer& tok_;
  EngineOptions opt_;
  int64_t max_context_;
  CachePool pool_;  // reserved/released by the scheduler thread only
  std::unique_ptr<PrefixCache> prefix_;  // null: off; lookups / inserts on the scheduler thread

  std::shared_ptr<EngineSignal> signal_;  // its mutex guards queue_, accepting_, stop_now_
  std::deque<Pending> queue_;
  bool accepting_ = true, stop_now_ = false;
  std::atomic<int64_t> in_flight_{0};  // submitted, not yet finished
  std::atomic<int64_t> running_count_{0};  // running_.size(), for submit()

  std::vector<std::unique_ptr<Sequence>> running_;  // scheduler thread only

  mutable std::mutex stats_mu_;
  EngineStats stats_;

  std::mutex shutdown_mu_;
  std::thread thread_;
};

}  // namespace dsv4
