#include "cli/gen_options.h"

#include <CLI/CLI.hpp>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <memory>
#include <random>

#ifdef _OPENMP
#include <omp.h>
#endif

#include "cli/commands.h"
#include "cli/device.h"
#include "cli/flags.h"
#include "core/error.h"
#include "grammar/gbnf.h"
#include "grammar/grammar_cache.h"

namespace dsv4::cli {

void ModelOptions::add_to(CLI::App& c) {
  model = default_model_dir();
  c.add_option("-m,--model", model, "Model directory (default: the bundled tiny-shakespeare, or $DSV4_MODEL_DIR)")
      ->check(existing_dir())
      ->each([this](const std::string&) { model_given = true; });
  c.add_option("--numerics", numerics, "official (DeepSeek's quantization-aware numerics) | reference (float32)")
      ->check(one_of({"official", "reference"}))
      ->capture_default_str();
  add_device_option(c, device, kernels);
  add_ranks_option(c, ranks);
  c.add_option("--threads", threads, "CPU threads (default: $OMP_NUM_THREADS, else every core)")
      ->check(int_in(1, 4096));
  auto* q = c.add_flag("-q,--quiet", quiet, "No loading or prefill progress, no notices");
  c.add_flag("-v,--verbose", verbose, "Also print the model, device and context before generating")->excludes(q);
}

void GenOptions::add_to(CLI::App& c) {
  ModelOptions::add_to(c);
  c.add_option("-n,--max-tokens", max_tokens, "Generate at most N tokens")->capture_default_str()->check(int_in(1, 1 << 30));
  c.add_option("-c,--ctx-size", ctx_size, "Context in tokens: prompt + generated (default: the model's; cuda 4096)")
      ->check(int_in(2));
  c.add_option("--temp,--temperature", temperature, "Sampling temperature; 0 = greedy")
      ->capture_default_str()
      ->check(number_in(0, 100));
  c.add_option("--top-p", top_p, "Nucleus sampling: keep the smallest set with probability >= P")
      ->capture_default_str()
      ->check(number_in(0, 1));
  c.add_option("--top-k", top_k, "Keep the K most likely tokens (0 = all)")->capture_default_str()->check(int_in(0, INT32_MAX));
  c.add_option("--min-p", min_p, "Keep tokens with p >= MIN_P * p(most likely)")->capture_default_str()->check(number_in(0, 1));
  c.add_option("--repeat-penalty", repeat_penalty, "Divide positive / multiply negative logits of seen tokens")
      ->capture_default_str()
      ->check(number_in(0.01, 100));
  c.add_option("--presence-penalty", presence_penalty, "Subtract from the logits of seen tokens")
      ->capture_default_str()
      ->check(number_in(-2, 2));
  c.add_option("--frequency-penalty", frequency_penalty, "Subtract count x F from the logits of seen tokens")
      ->capture_default_str()
      ->check(number_in(-2, 2));
  c.add_option("--seed", seed, "Random seed (same seed, same output; cpu and cuda exact kernels draw alike); default: random")
      ->check(int_in(0));
  c.add_option("--stop", stop, "Stop before this text (repeatable)")
      ->allow_extra_args(false)  // `--stop X PROMPT`: PROMPT is not a second stop string
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  auto* th = c.add_flag("--thinking", thinking, "Chat: let the model reason first (thinking mode)");
  c.add_flag("--no-thinking", no_thinking, "Chat: answer directly (chat mode; the default)")->excludes(th);
  c.add_option("--effort", effort, "Chat, thinking mode: reasoning effort")->check(one_of({"high", "max"}))->needs(th);
  c.add_option("--system", system, "Chat: the system message");
  c.add_option("-f,--file", file, "Read the prompt from FILE ('-': stdin)");
  c.add_flag("--stats", stats, "Print time to first token and tokens/s on stderr");
  c.add_flag("--json", json, "Print the text and the stats as one JSON object (nothing streamed)");
  c.add_flag("--no-color", no_color, "No dimmed reasoning or colours (also: NO_COLOR set in the environment)");
}

SamplingParams GenOptions::sampling() const {
  SamplingParams p;
  p.temperature = temperature;
  p.top_k = top_k;
  p.top_p = top_p;
  p.min_p = min_p;
  p.repetition_penalty = repeat_penalty;
  p.presence_penalty = presence_penalty;
  p.frequency_penalty = frequency_penalty;
  p.seed = seed >= 0 ? uint64_t(seed) : std::random_device{}();
  return p;
}

StopConditions GenOptions::stops(const Tokenizer& tok) const {
  StopConditions s;
  s.max_tokens = max_tokens;
  s.stop_strings = stop;
  if (auto eos = tok.eos_id()) s.stop_ids.push_back(*eos);
  return s;
}

bool GenOptions::color() const {
  const char* nc = std::getenv("NO_COLOR");  // https://no-color.org: set and not empty
  return !no_color && !(nc && *nc) && stdout_is_terminal();
}

GrammarConstraint GenOptions::grammar(const Tokenizer& tok, int64_t vocab, bool chat_thinking) const {
  GrammarConstraint g;
  if (json_schema.empty() && !json_object && grammar_file.empty()) return g;
  grammar::GrammarCache cache(tok, vocab, 1);
  if (!grammar_file.empty()) {
    std::ifstream f(grammar_file, std::ios::binary);
    if (!f) fail("--grammar: cannot read ", grammar_file);
    std::stringstream ss;
    ss << f.rdbuf();
    g.grammar = cache.get("gbnf", [&] { return grammar::parse_gbnf(ss.str(), grammar_file); });
  } else if (json_object) {
    g.grammar = cache.json_object();
  } else {
    std::string text = json_schema;
    if (std::ifstream f(json_schema); f && json_schema.find_first_of("{[") == std::string::npos) {
      std::stringstream ss;
      ss << f.rdbuf();
      text = ss.str();
    }
    nlohmann::ordered_json schema;
    try {
      schema = nlohmann::ordered_json::parse(text);
    } catch (const std::exception& e) {
      fail("--json-schema: expected a schema file or JSON text: ", e.what());
    }
    try {
      g.grammar = cache.json_schema(schema);
    } catch (const grammar::UnsupportedSchema& e) {
      fail("--json-schema: ", e.what());
    }
  }
  if (chat_thinking)
    if (auto id = tok.token_id("</think>")) g.start_after = *id;
  return g;
}

bool stdout_is_terminal() { return isatty(STDOUT_FILENO) != 0; }

void apply_threads(int threads) {
#ifdef _OPENMP
  if (threads > 0) omp_set_num_threads(threads);
#else
  (void)threads;
#endif
}

Loaded load_model_and_tokenizer(const ModelOptions& o, const char* command, int64_t max_ctx, int64_t chunk) {
  use_cuda(o.device, command);               // a wrong --device fails before anything loads
  Tokenizer tok = Tokenizer::load(o.model);  // before the weights: a missing tokenizer fails fast
  return Loaded{load_model(o, command, max_ctx, chunk), std::move(tok)};
}

std::unique_ptr<Runner> load_model(const ModelOptions& o, const char* command, int64_t max_ctx, int64_t chunk) {
  apply_threads(o.threads);
  const RunnerRequest r{.cuda = use_cuda(o.device, command), .numerics = o.numerics, .kernels = o.kernels,
                        .max_seqs = 1, .max_ctx = max_ctx, .chunk = chunk, .ranks = o.ranks, .quiet = o.quiet};
  return load_runner(o.model, r, o.quiet ? LoadProgress{} : terminal_load_progress(o.model));
}

LoadProgress terminal_load_progress(const std::string& what) {
  if (!isatty(STDERR_FILENO)) return {};
  auto last = std::make_shared<std::chrono::steady_clock::time_point>();
  return [what, last](const LoadStatus& s) {
    const auto now = std::chrono::steady_clock::now();
    const bool done = s.bytes_done >= s.bytes_total;
    if (!done && now - *last < std::chrono::milliseconds(100)) return;
    *last = now;
    const double gib = 1024.0 * 1024.0 * 1024.0;
    std::fprintf(stderr, "\rloading %s: %.2f / %.2f GiB, %zu tensors%s", what.c_str(), double(s.bytes_done) / gib,
                 double(s.bytes_total) / gib, s.tensors_done, done ? "\r\033[K" : "");
  };
}

void print_stats(const GenerationStats& s) {
  std::fflush(stdout);
  std::fprintf(stderr, "prompt %lld tok, %.1f tok/s | ttft %.3f s | generated %lld tok, %.1f tok/s\n",
               (long long)s.prompt_tokens, s.prompt_tok_s(), s.ttft_s, (long long)s.generated_tokens,
               s.decode_tok_s());
}

}  // namespace dsv4::cli
