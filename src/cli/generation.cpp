#include "cli/generation.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>

#include "cli/interrupt.h"
#include "core/error.h"

namespace dsv4::cli {
namespace {

// Returned instead of a sampled id when Ctrl-C arrived: a stop id no tokenizer has, so the loop ends
// as if the model had stopped and the text so far is kept.
constexpr int32_t kInterruptId = -2;
// Prefill is fed in chunks of this many tokens (as StepSequence would split it), so that a long
// prompt shows progress and Ctrl-C is seen between chunks.
constexpr int64_t kPrefillChunk = 256;

int64_t context_of(const Loaded& l, const GenOptions& o) {
  const int64_t model_ctx = std::min(l.model->config().max_position_embeddings, l.model->max_context());
  return o.ctx_size > 0 ? std::min(o.ctx_size, model_ctx) : model_ctx;
}

}  // namespace

CliGeneration generate_text(const Loaded& l, const std::vector<int32_t>& prompt, Sampler& sampler, const GenOptions& o,
                            const std::function<void(const std::string&)>& on_text) {
  CliGeneration g;
  g.context = context_of(l, o);
  if (int64_t(prompt.size()) >= g.context)
    fail("the prompt has ", prompt.size(), " tokens; the context holds ", g.context, " (", o.ctx_size > 0 ? "-c/--ctx-size" : "the model's",
         ", and one position is needed to generate)");
  ModelConfig cfg = l.model->config();
  cfg.max_position_embeddings = g.context;  // generate_steps stops at the end of the context
  StopConditions stop = o.stops(l.tok);
  stop.stop_ids.push_back(kInterruptId);

  StepSequence seq(*l.model, kPrefillChunk);
  const bool on_device = l.model->samples_on_device() && device_samplable(sampler.params());
  RowSampling row;
  row.params = sampler.params();
  const bool progress = !o.quiet && isatty(STDERR_FILENO) && int64_t(prompt.size()) > kPrefillChunk;
  const int64_t V = cfg.vocab_size;

  auto next = [&](const std::vector<int32_t>& tokens, const std::vector<int32_t>& history, Logprobs*) -> int32_t {
    if (InterruptScope::pending()) return kInterruptId;
    const int64_t T = int64_t(tokens.size());
    int64_t t0 = 0;
    for (; T - t0 > kPrefillChunk; t0 += kPrefillChunk) {  // the leading chunks: their logits are not needed
      seq.feed(std::vector<int32_t>(tokens.begin() + t0, tokens.begin() + t0 + kPrefillChunk), false);
      if (progress) std::fprintf(stderr, "\rprefill %lld / %lld tokens", (long long)(t0 + kPrefillChunk), (long long)T);
      if (InterruptScope::pending()) break;
    }
    if (progress && T > kPrefillChunk) std::fputs("\r\033[K", stderr);
    if (InterruptScope::pending()) return kInterruptId;
    const std::vector<int32_t> rest(tokens.begin() + t0, tokens.end());
    int32_t id;
    if (on_device) {
      id = seq.feed_sampled(rest, row);
    } else {
      const Tensor logits = seq.feed(rest, false);
      id = sampler.sample(logits.ptr(), V, history, nullptr, -1);
    }
    ++row.step;
    return id;
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
  const ModelConfig& c = l.model->config();
  // Only the GPU model samples on the device: that tells the two backends apart.
  std::fprintf(stderr, "model %s: %lld layers, hidden %lld, vocab %lld | %s, %s numerics | context %lld\n",
               o.model.c_str(), (long long)c.num_layers, (long long)c.hidden_size, (long long)c.vocab_size,
               l.model->samples_on_device() ? "cuda" : "cpu", o.numerics.c_str(),
               (long long)std::min(o.ctx_size > 0 ? o.ctx_size : c.max_position_embeddings, l.model->max_context()));
}

}  // namespace dsv4::cli
