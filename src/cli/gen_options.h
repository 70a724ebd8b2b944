// Options shared by the generating commands (run, chat): model, sampling, stops, numerics, stats.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "model/model.h"
#include "runtime/generate.h"
#include "runtime/sampler.h"
#include "runtime/step_model.h"
#include "tokenizer/tokenizer.h"

namespace CLI {
class App;
}

namespace dsv4::cli {

struct GenOptions {
  std::string model;  // default: the bundled model
  bool model_given = false;
  int max_tokens = 200;
  float temperature = 1.0f, top_p = 1.0f, min_p = 0.0f;
  int top_k = 0;
  float repeat_penalty = 1.0f, presence_penalty = 0.0f, frequency_penalty = 0.0f;
  int64_t seed = -1;  // -1: a random seed
  std::vector<std::string> stop;
  std::string numerics = "official";
  bool thinking = false, no_thinking = false;
  std::string effort;  // "", "high", "max"
  bool stats = false;
  std::string device = "auto";  // --device cpu | cuda | auto (cli/device.h)
  std::string kernels = "fast";  // --kernels fast | exact (cli/device.h)
  std::string json_schema;      // --json-schema FILE|JSON: constrained output (docs/structured-output.md)
  bool json_object = false;     // --json-object
  std::string grammar_file;     // --grammar FILE (grammar/gbnf.h)

  void add_to(CLI::App& c);  // registers -m, -n, --temp, ... on a subcommand
  SamplingParams sampling() const;
  StopConditions stops(const Tokenizer& tok) const;  // adds the tokenizer's EOS as a stop id
  // The --json-schema / --json-object / --grammar constraint (none without them); `chat_thinking`: it starts
  // after </think>. Throws dsv4::Error naming the flag on a bad or unsupported schema.
  GrammarConstraint grammar(const Tokenizer& tok, int64_t vocab, bool chat_thinking) const;
};

// A loaded model (one sequence at a time) and its tokenizer, with a progress line on a terminal while
// loading. The model runs on o.device (cli/device.h; `command` names the command in its errors): a
// CpuStepModel, or a CudaStepModel of one slot with `max_ctx` positions (0: the default).
struct Loaded {
  std::unique_ptr<StepModel> model;
  Tokenizer tok;
};
Loaded load_model_and_tokenizer(const GenOptions& o, const char* command, int64_t max_ctx = 0);
// A progress line on stderr while weights load (nothing when stderr is not a terminal).
LoadProgress terminal_load_progress(const std::string& what);

// "prompt 12 tok, 350.1 tok/s | ttft 0.034 s | 120 tok, 250.3 tok/s" on stderr.
void print_stats(const GenerationStats& s);

bool stdout_is_terminal();

}  // namespace dsv4::cli
