// Generation for the terminal commands (run, chat): runtime/generate's loop over the loaded model, plus
// what a person at a terminal needs — a prefill progress line, Ctrl-C stopping the reply
// (cli/interrupt.h), the -c/--ctx-size cap and a notice when the context ends the text.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "cli/gen_options.h"
#include "runtime/speculative.h"

namespace dsv4::cli {

// Returned instead of a sampled id when Ctrl-C arrived: a stop id no tokenizer has, so the loop ends
// as if the model had stopped and the text so far is kept.
constexpr int32_t kInterruptId = -2;

struct CliGeneration {
  GenerationResult result;
  bool interrupted = false;   // Ctrl-C stopped it (result holds the text until then)
  bool context_full = false;  // the context limit, not -n, ended it
  int64_t context = 0;        // positions the sequence could hold
  int64_t drafts = 0;            // --speculative k (0: plain decoding)
  SpeculativeStats speculative;  // the speculative decoder's counters (drafts > 0)
};

// Prompt -> completion on l.runner (each token drawn where Runner::on_backend says). Throws dsv4::Error when the
// prompt does not fit the context.
CliGeneration generate_text(const Loaded& l, const std::vector<int32_t>& prompt, Sampler& sampler, const GenOptions& o,
                            const std::function<void(const std::string&)>& on_text);

// The context notice on stderr (unless -q): "(stopped: the context of N tokens is full; ...)".
void print_generation_notices(const CliGeneration& g, const GenOptions& o);

// -v: "model DIR: N layers, hidden D, vocab V | cpu, official numerics | context C" on stderr.
void print_verbose_header(const Loaded& l, const GenOptions& o);

}  // namespace dsv4::cli
