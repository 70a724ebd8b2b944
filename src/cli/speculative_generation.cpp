#include "cli/speculative_generation.h"

#include <algorithm>
#include <cstdio>
#include <deque>

#include "cli/device.h"
#include "cli/interrupt.h"
#include "core/error.h"
#include "runtime/speculative.h"

namespace dsv4::cli {
void check_speculative_options(const GenOptions& o, const char* command) {
  if (o.speculative == 0) return;
  if (o.speculative < 1 || o.speculative > 3)
    fail("dsv4 ", command, ": --speculative takes 0 (off) to 3 drafts per step, got ", o.speculative);
  if (o.repeat_penalty != 1 || o.presence_penalty != 0 || o.frequency_penalty != 0)
    fail("dsv4 ", command, ": --speculative takes no --repeat-penalty, --presence-penalty or --frequency-penalty");
  if (!o.json_schema.empty() || o.json_object || !o.grammar_file.empty())
    fail("dsv4 ", command, ": --speculative takes no --json-schema, --json-object or --grammar");
  if (o.thinking) fail("dsv4 ", command, ": --speculative takes no --thinking (its reply is constrained after </think>)");
}

void check_speculative_model(const Loaded& l, const GenOptions& o, const char* command) {
  if (o.speculative == 0) return;
  Model& m = l.runner->model();
  if (m.num_mtp() < 1) {
    // The CUDA backend holds no MTP block yet (its num_mtp() is 0) though the checkpoint may have one.
    if (l.runner->backend_name() != "cpu" && !m.config().mtp_layers.empty())
      fail("dsv4 ", command, ": --speculative: the ", l.runner->backend_name(),
           " backend has no MTP block (use --device cpu)");
    fail("dsv4 ", command, ": --speculative needs an MTP block; ", o.model, " has none");
  }
}

CliGeneration generate_text_speculative(const Loaded& l, const std::vector<int32_t>& prompt, const GenOptions& o,
                                        const std::function<void(const std::string&)>& on_text) {
  CliGeneration g;
  const int64_t model_ctx = l.runner->max_context();
  g.context = o.ctx_size > 0 ? std::min(o.ctx_size, model_ctx) : model_ctx;
  if (int64_t(prompt.size()) >= g.context)
    fail("the prompt has ", prompt.size(), " tokens; the context holds ", g.context, " (",
         o.ctx_size > 0 ? "-c/--ctx-size" : "the model's", ", and one position is needed to generate)");
  ModelConfig cfg = l.runner->config();
  cfg.max_position_embeddings = g.context;  // generate_steps stops at the end of the context
  StopConditions stop = o.stops(l.tok);

  // The slot is held (and released) through the runner; the decoder drives the model in it.
  RunnerSequence seq(*l.runner);
  SamplingParams sp = o.sampling();
  sp.grammar = {};
  SpeculativeDecoder dec(l.runner->model(), seq.slot(),
                         {.drafts = o.speculative, .sampling = sp, .stop_ids = stop.stop_ids});
  stop.stop_ids.push_back(kInterruptId);

  // generate_steps asks for one id at a time: the prompt first (start()), then after each id it was
  // given. A round's ids are handed out one by one; the next round runs when they are used up, allowed
  // at most the tokens the loop still takes (the limit and the context end).
  const int64_t budget = std::min<int64_t>(stop.max_tokens, g.context - int64_t(prompt.size()));
  std::deque<int32_t> ready;
  auto next = [&](const std::vector<int32_t>& tokens, const std::vector<int32_t>& history, Logprobs*) -> int32_t {
    if (InterruptScope::pending()) return kInterruptId;
    if (history.size() == prompt.size()) return dec.start(tokens);
    if (ready.empty()) {
      const int64_t left = budget - int64_t(history.size() - prompt.size());
      const std::vector<int32_t> r = dec.round(std::max<int64_t>(left, 1));
      ready.assign(r.begin(), r.end());
    }
    const int32_t id = ready.front();
    ready.pop_front();
    return id;
  };
  g.result = generate_steps(cfg, next, l.tok, prompt, stop, -1, on_text);
  g.interrupted = g.result.stop_id == kInterruptId;
  if (g.interrupted) g.result.stop_id = -1;
  g.context_full = g.result.finish == FinishReason::Length &&
                   int64_t(prompt.size() + g.result.ids.size()) >= g.context && int64_t(g.result.ids.size()) < o.max_tokens;
  g.drafts = o.speculative;
  g.speculative = dec.stats();
  return g;
}

void print_speculative_stats(const SpeculativeStats& s, int64_t drafts) {
  std::fflush(stdout);
  std::string per_depth;
  for (size_t j = 0; j < s.proposed_at.size(); ++j) {
    char b[32];
    std::snprintf(b, sizeof b, "%s%.2f", j ? " / " : "",
                  s.proposed_at[j] ? double(s.accepted_at[j]) / double(s.proposed_at[j]) : 0.0);
    per_depth += b;
  }
  std::fprintf(stderr,
               "speculative k %lld | %lld verify steps, %lld plain | acceptance %.3f (%s) | %.2f tokens per verify\n",
               (long long)drafts, (long long)s.rounds, (long long)s.plain_steps, s.acceptance(), per_depth.c_str(),
               s.tokens_per_verify());
}

}  // namespace dsv4::cli
