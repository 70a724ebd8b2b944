#include "cli/generation.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>

#include "cli/interrupt.h"
#include "cli/speculative_generation.h"
#include "core/error.h"

namespace dsv4::cli {
namespace {

int64_t context_of(const Loaded& l, const GenOptions& o) {
  const int64_t model_ctx = l.runner->max_context();
  return o.ctx_size > 0 ? std::min(o.ctx_size, model_ctx) : model_ctx;
}

}  // namespace

CliGeneration generate_text(const Loaded& l, const std::vector<int32_t>& prompt, Sampler& sampler, const GenOptions& o,
                            const std::function<void(const std::string&)>& on_text) {
  if (o.speculative > 0) return generate_text_speculative(l, prompt, o, on_text);
  CliGeneration g;
  g.context = context_of(l, o);
  if (int64_t(prompt.size()) >= g.context)
    fail("the prompt has ", prompt.size(), " tokens; the context holds ", g.context, " (", o.ctx_size > 0 ? "-c/--ctx-size" : "the model's",
         ", and one position is needed to generate)");
  ModelConfig cfg = l.runner->config();
  cfg.max_position_embeddings = g.context;  // generate_steps stops at the end of the context
  StopConditions stop = o.stops(l.tok);
  stop.stop_ids.push_back(kInterruptId);

  // The prompt is fed in the runner's pieces (load_model: 256 tokens), so that a long prompt shows
  // progress and Ctrl-C is seen between them.
  RunnerSequence seq(*l.runner);
  const bool progress = !o.quiet && isatty(STDERR_FILENO);
  auto next = [&](const std::vector<int32_t>& tokens, const std::vector<int32_t>& history, Logprobs*) -> int32_t {
    if (InterruptScope::pending()) return kInterruptId;
    const int64_t T = int64_t(tokens.size());
    const bool show = progress && l.runner->pieces(T).size() > 1;
    const int32_t id = seq.next(tokens, sampler, history, nullptr, -1, [&](int64_t done, int64_t total) {
      if (show) std::fprintf(stderr, "\rprefill %lld / %lld tokens", (long long)done, (long long)total);
      return !InterruptScope::pending();
    });
    if (show) std::fputs("\r\033[K", stderr);
    return id < 0 ? kInterruptId : id;
  };
  g.result = generate_steps(cfg, next, l.tok, prompt, stop, -1, on_text);
  g.interrupted = g.result.stop_id == kInterruptId;
  if (g.interrupted) g.result.stop_id = -1;
  g.context_full = g.result.finish == FinishReason::Length &&
                   int64_t(prompt.size() + g.result.ids.size()) >= g.context && int64_t(g.result.ids.size()) < o.max_tokens;
  return g;
}

void print_generation_notices(const CliGeneration& g, const GenOptions& o) {
  if (o.quiet || !g.context_full) return;
  std::fflush(stdout);
  std::fprintf(stderr, "(stopped: the context of %lld tokens is full%s)\n", (long long)g.context,
               o.ctx_size > 0 ? "; -c/--ctx-size sets it" : "");
}

void print_verbose_header(const Loaded& l, const GenOptions& o) {
  if (!o.verbose) return;
  const ModelConfig& c = l.runner->config();
  std::fprintf(stderr, "model %s: %lld layers, hidden %lld, vocab %lld | %s, %s numerics | context %lld\n",
               o.model.c_str(), (long long)c.num_layers, (long long)c.hidden_size, (long long)c.vocab_size,
               l.runner->backend_name().c_str(), o.numerics.c_str(), (long long)context_of(l, o));
}

}  // namespace dsv4::cli
