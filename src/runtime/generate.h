// The generation loop for one sequence: prefill the prompt, then decode one token per step with the
// cache, sampling each token, streaming text as complete UTF-8, stopping on a stop token (EOS), a stop
// string (cut exactly, never streamed) or the token limit.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "io/config.h"
#include "runtime/sampler.h"
#include "tokenizer/tokenizer.h"

namespace dsv4 {

struct StopConditions {
  int max_tokens = 256;                   // generated tokens at most
  std::vector<std::string> stop_strings;  // generation ends before the first occurrence
  std::vector<int32_t> stop_ids;          // e.g. EOS: ends generation, not part of the text
};

enum class FinishReason { Stop, Length };
const char* finish_reason_name(FinishReason f);  // "stop" | "length"

struct GenerationStats {
  int64_t prompt_tokens = 0, generated_tokens = 0;
  double prefill_s = 0;  // prompt forward
  double ttft_s = 0;     // until the first generated token was sampled
  double decode_s = 0;   // all decode steps after the first token
  double prompt_tok_s() const { return prefill_s > 0 ? double(prompt_tokens) / prefill_s : 0; }
  double decode_tok_s() const { return decode_s > 0 ? double(generated_tokens - 1) / decode_s : 0; }
};

struct GenerationResult {
  std::vector<int32_t> ids;  // generated ids (a stop id is not included)
  std::string text;          // their text, cut before a stop string
  FinishReason finish = FinishReason::Length;
  int32_t stop_id = -1;            // the stop id that ended generation, if one did
  std::vector<Logprobs> logprobs;  // per generated id, when requested
  GenerationStats stats;
};

// The loop with the sampling inside the step: `next` feeds `tokens` (the prompt, then the last id) and
// returns the next id; `history` is the prompt + the ids generated so far; `lp` (null unless
// top_logprobs >= 0) receives the id's logprobs. top_logprobs: -1 none, 0 the chosen token only, N
// also the N best. `on_text` receives each newly completed piece of text (never part of a stop
// string). Throws dsv4::Error when the prompt is empty or does not fit cfg.max_position_embeddings.
// generate() over a Runner (runtime/runner.h) is this loop.
using NextFn = std::function<int32_t(const std::vector<int32_t>& tokens, const std::vector<int32_t>& history, Logprobs* lp)>;
GenerationResult generate_steps(const ModelConfig& cfg, const NextFn& next, const Tokenizer& tok,
                                const std::vector<int32_t>& prompt, const StopConditions& stop, int top_logprobs = -1,
                                const std::function<void(const std::string&)>& on_text = {});

// Holds back text that might be the beginning of a stop string; cuts at the first stop string.
class StopStringFilter {
 public:
  explicit StopStringFilter(std::vector<std::string> stops) : stops_(std::move(stops)) {}
  // Adds text; returns what can be emitted now. `stopped()` tells whether a stop string was found.
  std::string push(const std::string& text);
  std::string flush();  // the held-back rest (no stop string in it)
  bool stopped() const { return stopped_; }

 private:
  std::vector<std::string> stops_;
  std::string pending_;
  bool stopped_ = false;
};

}  // namespace dsv4
