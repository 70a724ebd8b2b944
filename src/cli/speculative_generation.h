// dsv4 run --speculative k: the terminal generation (cli/generation.h) with runtime/speculative.h's
// decoder in place of one token per step: MTP block 0 drafts k tokens, one main call verifies them.
// The text, the stop strings, the token limit, EOS and the context end are generate_steps' as in a
// plain run; greedy output is plain greedy output token for token (docs/speculative.md).
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "cli/gen_options.h"
#include "cli/generation.h"

namespace dsv4::cli {

// The one-line refusals that need no model: a k outside 1..3, penalties, grammars, ranks. `command`
// names the command in the error. A speculative run takes one slot, as a plain one (load_model).
void check_speculative_options(const GenOptions& o, const char* command);
// The ones that need the loaded model: no MTP block (or none on this backend), verify calls too small.
void check_speculative_model(const Loaded& l, const GenOptions& o, const char* command);

// generate_text (cli/generation.h) with o.speculative drafts per verify step; g.speculative holds the
// decoder's counters. The prompt is fed in one piece (no prefill progress line).
CliGeneration generate_text_speculative(const Loaded& l, const std::vector<int32_t>& prompt, const GenOptions& o,
                                        const std::function<void(const std::string&)>& on_text);

// --stats: "speculative k 2 | 40 verify steps, acceptance 0.420 (0.55 / 0.29) | 1.62 tokens per verify" on stderr.
void print_speculative_stats(const SpeculativeStats& s, int64_t drafts);

}  // namespace dsv4::cli
