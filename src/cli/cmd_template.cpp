// dsv4 template: render a conversation into the exact DeepSeek-V4 prompt (encoding_dsv4.py).
//   dsv4 template [-m DIR] --messages FILE.json [--thinking|--chat] [--effort high|max] [--ids [--json]]
// FILE holds a JSON array of messages or {"messages": [...], "tools": [...], "response_format": ...}.
// Prints the prompt exactly (a newline added only on a terminal), or its token ids with --ids.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <fstream>
#include <iostream>
#include <sstream>

#include "chat/encoder.h"
#include "cli/cli_io.h"
#include "cli/commands.h"
#include "cli/flags.h"
#include "core/error.h"
#include "tokenizer/tokenizer.h"

namespace dsv4::cli {

namespace {


struct TemplateArgs {
  std::string model = default_model_dir();
  std::string messages;
  bool thinking = false, chat = false, keep_thinking = false, no_bos = false, ids = false, json = false;
  std::string effort;
};

void run_template(const TemplateArgs& a) {
  const std::string name = a.messages == "-" ? "stdin" : a.messages;
  auto doc = chat::parse_json_document(read_input_file(a.messages), name);
  chat::EncodeOptions opt;
  opt.thinking_mode = a.thinking ? chat::ThinkingMode::Thinking : chat::ThinkingMode::Chat;
  opt.reasoning_effort = a.effort.empty() ? chat::ReasoningEffort::None : chat::parse_reasoning_effort(a.effort);
  opt.drop_thinking = !a.keep_thinking;
  opt.add_bos = !a.no_bos;
  std::string prompt;
  try {
    prompt = chat::encode_messages(chat::messages_from_document(doc), opt);
  } catch (const Error& e) {
    fail(name, ": ", e.what());
  }
  if (a.ids) {
    print_ids(Tokenizer::load(a.model).encode(prompt), a.json);
    return;
  }
  write_text(prompt);
}

}  // namespace

void register_template(CLI::App& app) {
  auto a = std::make_shared<TemplateArgs>();
  CLI::App* c = app.add_subcommand("template", "Render messages into the exact DeepSeek-V4 prompt");
  c->add_option("-m,--model", a->model, "Model directory with tokenizer.json, for --ids (default: the bundled model)")
                    ->check(existing_dir());
  c->add_option("--messages", a->messages, "JSON file of messages ('-' for stdin)")->required();
  auto* th = c->add_flag("--thinking", a->thinking, "Thinking mode (the prompt ends with <think>)");
  auto* ch = c->add_flag("--chat", a->chat, "Chat mode (the default; the prompt ends with </think>)");
  th->excludes(ch);
  c->add_option("--effort", a->effort, "Reasoning effort in thinking mode")->check(one_of({"high", "max"}))->needs(th);
  c->add_flag("--keep-thinking", a->keep_thinking, "Keep the reasoning of earlier turns (drop_thinking off)");
  c->add_flag("--no-bos", a->no_bos, "Do not start with the BOS text");
  auto* ids = c->add_flag("--ids", a->ids, "Print token ids instead of the text");
  c->add_flag("--json", a->json, "With --ids: print a JSON array")->needs(ids);
  c->callback([a] { run_template(*a); });
}

}  // namespace dsv4::cli
