// dsv4 run: generate from a prompt and stream the text as it is produced.
#include <CLI/CLI.hpp>
#include <unistd.h>

#include <cstdio>
#include <iostream>
#include <iterator>

#include "cli/chat_turn.h"
#include "cli/commands.h"
#include "cli/device.h"
#include "cli/gen_options.h"
#include "core/error.h"

namespace dsv4::cli {
namespace {

struct RunArgs {
  GenOptions gen;
  std::string prompt;
  bool raw = false, chat = false;
};

void run(RunArgs& a) {
  // --raw is the default for the bundled (base) model, --chat for a model given with -m.
  const bool chat_mode = a.chat || (!a.raw && a.gen.model_given);
  if (a.prompt.empty() && !isatty(STDIN_FILENO))
    a.prompt.assign(std::istreambuf_iterator<char>(std::cin), std::istreambuf_iterator<char>());
  if (a.prompt.empty()) a.prompt = chat_mode ? "Write a short poem about the sea." : "ROMEO:\n";

  auto print_piece = [](const std::string& piece) {
    std::fputs(piece.c_str(), stdout);
    std::fflush(stdout);
  };
  if (!chat_mode && use_cuda(a.gen.device, "run")) {
    if (a.gen.numerics != "official") fail("--device cuda runs official numerics only (use --device cpu)");
    const Tokenizer tok = Tokenizer::load(a.gen.model);
    const std::vector<int32_t> prompt = tok.encode(a.prompt);
    // A context of the prompt + the tokens to generate; tokens sampled on the GPU (step_model.h).
    auto model = load_step_model(a.gen.model, true, a.gen.numerics, 1, int64_t(prompt.size()) + a.gen.max_tokens + 1,
                                 256, terminal_load_progress(a.gen.model), a.gen.kernels);
    SamplingParams sp = a.gen.sampling();
    sp.grammar = a.gen.grammar(tok, model->config().vocab_size, false);
    Sampler sampler(sp, a.gen.stops(tok).stop_ids);
    auto r = generate(*model, tok, prompt, sampler, a.gen.stops(tok), -1, print_piece);
    std::fputs("\n", stdout);
    if (a.gen.stats) print_stats(r.stats);
    return;
  }
  Loaded l = load_model_and_tokenizer(a.gen, "run");  // --chat: on cuda too
  SamplingParams sp = a.gen.sampling();
  sp.grammar = a.gen.grammar(l.tok, l.model->config().vocab_size, chat_mode && a.gen.thinking);
  Sampler sampler(sp, a.gen.stops(l.tok).stop_ids);
  GenerationStats stats;
  if (chat_mode) {
    nlohmann::ordered_json messages = nlohmann::ordered_json::array();
    messages.push_back({{"role", "user"}, {"content", a.prompt}});
    stats = run_chat_turn(l, messages, a.gen, sampler, stdout_is_terminal()).gen.stats;
  } else {
    auto r = generate(*l.model, l.tok, l.tok.encode(a.prompt), sampler, a.gen.stops(l.tok), -1, print_piece);
    std::fputs("\n", stdout);
    stats = r.stats;
  }
  if (a.gen.stats) print_stats(stats);
}

}  // namespace

void register_run(CLI::App& app) {
  auto a = std::make_shared<RunArgs>();
  CLI::App* c = app.add_subcommand("run", "Generate text from a prompt, streamed as it is produced");
  c->add_option("prompt", a->prompt, "The prompt (default: stdin when piped, else a short built-in prompt)");
  a->gen.add_to(*c);
  auto* js = c->add_option("--json-schema", a->gen.json_schema,
                           "Constrain the output to JSON valid under this schema (a file or inline JSON)");
  auto* jo = c->add_flag("--json-object", a->gen.json_object, "Constrain the output to a JSON object")->excludes(js);
  c->add_option("--grammar", a->gen.grammar_file, "Constrain the output to a grammar (a GBNF-like file)")
      ->excludes(js)
      ->excludes(jo);
  auto* raw = c->add_flag("--raw", a->raw, "Feed the prompt as plain text, print only the continuation "
                                            "(default for the bundled base model)");
  c->add_flag("--chat", a->chat, "Apply the DeepSeek-V4 chat encoding; print reasoning apart from the answer "
                                 "(default with -m)")
      ->excludes(raw);
  c->callback([a] { run(*a); });
}

}  // namespace dsv4::cli
