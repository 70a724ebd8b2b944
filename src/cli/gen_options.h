// Options shared by the commands that load a model (ModelOptions: run, chat, perplexity) and by the
// generating ones (GenOptions: run, chat): model, sampling, stops, prompt, output.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "cli/device.h"
#include "runtime/generate.h"
#include "runtime/sampler.h"
#include "runtime/runner.h"
#include "tokenizer/tokenizer.h"

namespace CLI {
class App;
}

namespace dsv4::cli {

struct ModelOptions {
  std::string model;  // default: the bundled model
  bool model_given = false;
  std::string numerics = "official";
  std::string device = "auto";  // --device cpu | cuda | auto (cli/device.h)
  std::string kernels = "fast";  // --kernels fast | exact: the CUDA kernel tier (cli/device.h)
  RankFlags ranks;              // --ranks N / --gpus N: expert-parallel ranks (cli/device.h)
  int threads = 0;              // --threads (0: OpenMP's default, OMP_NUM_THREADS or every core)
  bool quiet = false, verbose = false;

  void add_to(CLI::App& c);  // registers -m, --numerics, --device, --threads, -q, -v on a subcommand
};

struct GenOptions : ModelOptions {
  int max_tokens = 200;
  int64_t ctx_size = 0;  // -c: positions per sequence (0: the model's; on cuda capped at kCudaDefaultContext)
  float temperature = 1.0f, top_p = 1.0f, min_p = 0.0f;
  int top_k = 0;
  float repeat_penalty = 1.0f, presence_penalty = 0.0f, frequency_penalty = 0.0f;
  int64_t seed = -1;  // -1: a random seed
  std::vector<std::string> stop;
  bool thinking = false, no_thinking = false;
  std::string effort;  // "", "high", "max"
  std::string system;  // --system: the system message (chat encoding)
  std::string file;    // -f: the prompt from a file ("-": stdin)
  bool stats = false, json = false, no_color = false;
  std::string json_schema;   // --json-schema FILE|JSON: constrained output (docs/structured-output.md)
  bool json_object = false;  // --json-object
  std::string grammar_file;  // --grammar FILE (grammar/gbnf.h)
  int64_t speculative = 0;   // run --speculative k: MTP drafts per verify step (0: off; cli/speculative_generation.h)

  void add_to(CLI::App& c);  // ModelOptions + -n, -c, --temp, ..., --json, --no-color
  SamplingParams sampling() const;
  StopConditions stops(const Tokenizer& tok) const;  // adds the tokenizer's EOS as a stop id
  // Dimmed reasoning and colours: stdout is a terminal, no --no-color, NO_COLOR unset or empty.
  bool color() const;
  // Whether a chat-only option (--system, --thinking, --no-thinking, --effort) was given.
  bool chat_options_given() const { return !system.empty() || thinking || no_thinking || !effort.empty(); }
  // The --json-schema / --json-object / --grammar constraint (none without them); `chat_thinking`: it starts
  // after </think>. Throws dsv4::Error naming the flag on a bad or unsupported schema.
  GrammarConstraint grammar(const Tokenizer& tok, int64_t vocab, bool chat_thinking) const;
};

// A loaded model (one sequence at a time) and its tokenizer, with a progress line on a terminal while
// loading (not with -q). The runner's backend is on o.device (cli/device.h; `command` names the command
// in its errors), one slot of `max_ctx` positions on cuda (0: the default), Model calls of up to
// `chunk` tokens (0: default_call_tokens). The runner is null on a rank other than 0 of a TCP group once it followed rank 0's
// calls (cli/device.h load_runner): the command returns without output.
struct Loaded {
  std::unique_ptr<Runner> runner;
  Tokenizer tok;
};
Loaded load_model_and_tokenizer(const ModelOptions& o, const char* command, int64_t max_ctx = 0, int64_t chunk = 0);
std::unique_ptr<Runner> load_model(const ModelOptions& o, const char* command, int64_t max_ctx = 0, int64_t chunk = 0);
// A progress line on stderr while weights load (nothing when stderr is not a terminal).
LoadProgress terminal_load_progress(const std::string& what);
// --threads: the OpenMP threads of the CPU backend (0 leaves OpenMP's default).
void apply_threads(int threads);

// "prompt 12 tok, 350.1 tok/s | ttft 0.034 s | 120 tok, 250.3 tok/s" on stderr.
void print_stats(const GenerationStats& s);

bool stdout_is_terminal();

}  // namespace dsv4::cli
