// dsv4 chat: interactive multi-turn chat. /reset clears the history, /exit or Ctrl-D ends.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <iostream>
#include <string>

#include "cli/chat_turn.h"
#include "cli/commands.h"
#include "cli/gen_options.h"
#include "core/error.h"

namespace dsv4::cli {
namespace {

void chat(GenOptions& o) {
  Loaded l = load_model_and_tokenizer(o, "chat");
  Sampler sampler(o.sampling());
  const bool tty = stdout_is_terminal();
  nlohmann::ordered_json history = nlohmann::ordered_json::array();
  if (tty) std::printf("dsv4 chat with %s. /reset clears the history, /exit or Ctrl-D quits.\n", o.model.c_str());
  std::string line;
  while (true) {
    if (tty) std::fputs("> ", stdout);
    std::fflush(stdout);
    if (!std::getline(std::cin, line)) break;
    if (line == "/exit" || line == "/quit") break;
    if (line == "/reset") {
      history = nlohmann::ordered_json::array();
      std::puts("(history cleared)");
      continue;
    }
    if (line.empty()) continue;
    history.push_back({{"role", "user"}, {"content", line}});
    try {
      ChatTurn t = run_chat_turn(l, history, o, sampler, tty);
      history.push_back(t.message);
      if (o.stats) print_stats(t.gen.stats);
    } catch (const Error& e) {
      history.erase(history.size() - 1);  // the turn failed: forget it, keep chatting
      std::fprintf(stderr, "dsv4: error: %s\n", e.what());
    }
  }
  if (tty) std::puts("");
}

}  // namespace

void register_chat(CLI::App& app) {
  auto o = std::make_shared<GenOptions>();
  CLI::App* c = app.add_subcommand("chat", "Interactive multi-turn chat (/reset, /exit, Ctrl-D)");
  o->add_to(*c);
  c->callback([o] { chat(*o); });
}

}  // namespace dsv4::cli
