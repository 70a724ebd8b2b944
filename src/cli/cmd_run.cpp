// dsv4 run: generate from a prompt and stream the text as it is produced.
#include <CLI/CLI.hpp>
#include <unistd.h>

#include <cstdio>
#include <iostream>
#include <iterator>

#include "cli/chat_turn.h"
#include "cli/cli_io.h"
#include "cli/commands.h"
#include "cli/device.h"
#include "cli/flags.h"
#include "cli/gen_options.h"
#include "cli/generation.h"
#include "cli/speculative_generation.h"
#include "core/error.h"

namespace dsv4::cli {
namespace {

struct RunArgs {
  GenOptions gen;
  std::string prompt;
  bool raw = false, chat = false;
};

void run(RunArgs& a) {
  // --raw is the default for the bundled (base) model, --chat for a model given with -m or when a
  // chat-only option (--system, --thinking, --effort) asks for it.
  const bool chat_mode = a.chat || (!a.raw && (a.gen.model_given || a.gen.chat_options_given()));
  if (!a.gen.file.empty())
    a.prompt = read_input_file(a.gen.file);
  else if (a.prompt.empty() && !isatty(STDIN_FILENO))
    a.prompt.assign(std::istreambuf_iterator<char>(std::cin), std::istreambuf_iterator<char>());
  if (a.prompt.empty()) a.prompt = chat_mode ? "Write a short poem about the sea." : "ROMEO:\n";

  use_cuda(a.gen.device, "run");  // a wrong --device fails before anything loads
  check_speculative_options(a.gen, "run");
  Tokenizer tok = Tokenizer::load(a.gen.model);
  const std::vector<int32_t> raw_prompt = chat_mode ? std::vector<int32_t>{} : tok.encode(a.prompt);
  // On cuda the state is allocated for the whole context: a raw prompt needs prompt + tokens to generate.
  const int64_t max_ctx = a.gen.ctx_size > 0 ? a.gen.ctx_size
                          : chat_mode        ? 0
                                             : int64_t(raw_prompt.size()) + a.gen.max_tokens + 1;
  const Loaded l{load_model(a.gen, "run", max_ctx), std::move(tok)};
  if (!l.runner) return;  // a rank other than 0 of a TCP group: it made rank 0's calls
  check_speculative_model(l, a.gen, "run");
  print_verbose_header(l, a.gen);
  SamplingParams sp = a.gen.sampling();
  sp.grammar = a.gen.grammar(l.tok, l.runner->config().vocab_size, chat_mode && a.gen.thinking);
  Sampler sampler(sp, a.gen.stops(l.tok).stop_ids);
  CliGeneration g;
  if (chat_mode) {
    nlohmann::ordered_json messages = nlohmann::ordered_json::array();
    if (!a.gen.system.empty()) messages.push_back({{"role", "system"}, {"content", a.gen.system}});
    messages.push_back({{"role", "user"}, {"content", a.prompt}});
    g = run_chat_turn(l, messages, a.gen, sampler).gen;
  } else {
    const bool stream = !a.gen.json;
    g = generate_text(l, raw_prompt, sampler, a.gen, [stream](const std::string& piece) {
      if (!stream) return;
      std::fputs(piece.c_str(), stdout);
      std::fflush(stdout);
    });
    if (stream)
      std::fputs("\n", stdout);
    else
      print_json_result(g.result.text, "", g);
  }
  print_generation_notices(g, a.gen);
  if (a.gen.stats) print_stats(g.result.stats);
  if (a.gen.stats && g.drafts > 0) print_speculative_stats(g.speculative, g.drafts);
}

}  // namespace

void register_run(CLI::App& app) {
  auto a = std::make_shared<RunArgs>();
  CLI::App* c = app.add_subcommand("run", "Generate text from a prompt, streamed as it is produced");
  auto* prompt = c->add_option("prompt", a->prompt, "The prompt (default: -f FILE, stdin when piped, else a short built-in prompt)");
  a->gen.add_to(*c);
  c->get_option("--file")->excludes(prompt);
  auto* js = c->add_option("--json-schema", a->gen.json_schema,
                           "Constrain the output to JSON valid under this schema (a file or inline JSON)");
  auto* jo = c->add_flag("--json-object", a->gen.json_object, "Constrain the output to a JSON object")->excludes(js);
  c->add_option("--grammar", a->gen.grammar_file, "Constrain the output to a grammar (a GBNF-like file)")
      ->excludes(js)
      ->excludes(jo);
  auto* raw = c->add_flag("--raw", a->raw, "Feed the prompt as plain text, print only the continuation "
                                            "(default for the bundled base model)");
  c->add_flag("--chat", a->chat, "Apply the DeepSeek-V4 chat encoding; print reasoning apart from the answer "
                                 "(default with -m, --system, --thinking)")
      ->excludes(raw);
  c->add_option("--speculative", a->gen.speculative,
                 "Speculative decoding: MTP block 0 drafts K tokens per verify step, 1-3 (0 = off; same greedy text)")
      ->capture_default_str()
      ->check(int_in(0, 3));
  for (const char* chat_only : {"--system", "--thinking", "--no-thinking", "--effort"})
    raw->excludes(c->get_option(chat_only));
  c->callback([a] { run(*a); });
}

}  // namespace dsv4::cli
