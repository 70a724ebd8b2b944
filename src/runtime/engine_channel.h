// The per-request channel between the engine's scheduler thread (the producer) and whoever waits for
// the request's output (an HTTP handler, a test): a queue of events and a cancellation flag.
//
// Events of one request, in order: Token* then exactly one Finished or Failed. Token texts and the
// Finished text concatenate to the completion text: complete UTF-8 (StreamDecoder), cut before the
// first stop string, which never appears in any piece (StopStringFilter).
#pragma once
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "runtime/generate.h"
#include "runtime/sampler.h"

namespace dsv4 {

struct EngineEvent {
  enum class Kind { Token, Finished, Failed };
  // Why a request Failed: Cancelled (its channel was cancelled), ShuttingDown (shutdown() ended it:
  // still queued, or running past the grace period), Internal (the model or sampler threw).
  enum class FailReason { Internal, Cancelled, ShuttingDown };
  Kind kind = Kind::Token;
  FailReason fail_reason = FailReason::Internal;  // Failed only
  // Token: the generated id, the text it completed (often empty while a character or a possible stop
  // string is held back) and, when requested, its log-probabilities.
  int32_t id = -1;
  std::string text;  // Token: the completed text; Finished: the held-back rest; Failed: the message
  bool has_logprobs = false;
  Logprobs logprobs;
  // Finished: why, the stop id that ended it (EOS; -1 if none), and the token counts.
  FinishReason finish = FinishReason::Length;
  int32_t stop_id = -1;
  int64_t prompt_tokens = 0, completion_tokens = 0;
  int64_t cached_tokens = 0;  // of the prompt, restored from the prefix cache (not computed)

  bool final() const { return kind != Kind::Token; }
};

// Wakes the engine's scheduler: shared by the engine and its channels so that a channel may outlive
// the engine safely.
struct EngineSignal {
  std::mutex mu;
  std::condition_variable cv;
  bool dirty = false;  // something changed (a request arrived or was cancelled)
  void notify();
};

class RequestChannel {
 public:
  explicit RequestChannel(std::shared_ptr<EngineSignal> signal) : signal_(std::move(signal)) {}

  // Consumer side. Waits up to `timeout` for events and returns those available (none on timeout).
  std::vector<EngineEvent> wait(std::chrono::milliseconds timeout);
  // Asks the engine to drop the request; it frees the sequence before its next step. Idempotent.
  void cancel();
  bool cancelled() const { return cancelled_.load(); }
  // The final event was taken by the consumer.
  bool done() const { return done_; }

  // Engine side.
  void push(EngineEvent e);

 private:
  std::shared_ptr<EngineSignal> signal_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<EngineEvent> events_;
  std::atomic<bool> cancelled_{false};
  bool done_ = false;  // consumer side only
};

}  // namespace dsv4
