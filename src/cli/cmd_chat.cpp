// dsv4 chat: interactive multi-turn chat. On a terminal the input line is libedit's (cli/line_editor.h:
// editing, history, bracketed paste); from a pipe it reads lines. A line ending in '\' continues on the
// next. Commands start with '/' (/help); Ctrl-C stops a reply, Ctrl-D or /exit quits.
#include <CLI/CLI.hpp>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <iostream>
#include <memory>
#include <string>

#include "chat/encoder.h"
#include "cli/chat_turn.h"
#include "cli/cli_io.h"
#include "cli/commands.h"
#include "cli/gen_options.h"
#include "cli/interrupt.h"
#include "cli/line_editor.h"
#include "core/error.h"

namespace dsv4::cli {
namespace {

using nlohmann::ordered_json;

constexpr const char* kHelp =
    "/help           this list\n"
    "/system TEXT    set the system message (/system alone removes it)\n"
    "/save FILE      write the conversation as OpenAI-style JSON {\"messages\": [...]}\n"
    "/load FILE      read a conversation (a JSON array of messages or {\"messages\": [...]})\n"
    "/reset          forget the conversation (the system message stays)\n"
    "/exit, /quit    quit (also Ctrl-D)\n"
    "A line ending in \\ continues on the next; a pasted block is one message; start a message with //\n"
    "to send a leading /. Ctrl-C stops a reply and keeps the conversation.\n";

// The conversation: the messages so far, a system message first when there is one.
struct Conversation {
  ordered_json messages = ordered_json::array();

  bool has_system() const { return !messages.empty() && messages[0].value("role", "") == "system"; }
  void set_system(const std::string& text) {
    if (has_system()) messages.erase(messages.begin());
    if (!text.empty()) messages.insert(messages.begin(), ordered_json{{"role", "system"}, {"content", text}});
  }
  void reset() {
    ordered_json keep = ordered_json::array();
    if (has_system()) keep.push_back(messages[0]);
    messages = keep;
  }
};

// Where the messages come from: the line editor on a terminal, lines of stdin otherwise.
class Input {
 public:
  explicit Input(bool tty) {
    if (tty) editor_ = std::make_unique<LineEditor>(chat_history_path());
  }
  // The next message: continuation lines ('\' at the end) joined with newlines.
  LineEditor::Input next() {
    LineEditor::Input in = line("> ");
    while (in.status == LineEditor::Status::Line && !in.text.empty() && in.text.back() == '\\') {
      in.text.pop_back();
      LineEditor::Input more = line(". ");
      if (more.status != LineEditor::Status::Line) return more;
      in.text += "\n" + more.text;
    }
    if (editor_ && in.status == LineEditor::Status::Line) editor_->remember(in.text);
    return in;
  }

 private:
  LineEditor::Input line(const std::string& prompt) {
    if (editor_) return editor_->read(prompt);
    LineEditor::Input in;
    if (std::getline(std::cin, in.text)) in.status = LineEditor::Status::Line;
    return in;
  }
  std::unique_ptr<LineEditor> editor_;
};

void save(const Conversation& c, const std::string& path) {
  std::ofstream f(path, std::ios::binary);
  if (!f) fail("/save: cannot write ", path);
  f << ordered_json{{"messages", c.messages}}.dump(2) << "\n";
  if (!f) fail("/save: cannot write ", path);
}

void load(Conversation& c, const std::string& path) {
  ordered_json messages = chat::messages_from_document(chat::parse_json_document(read_input_file(path), path));
  for (size_t i = 0; i < messages.size(); ++i)
    if (!messages[i].is_object() || !messages[i].contains("role"))
      fail(path, ": message ", i, " is not an object with a \"role\"");
  c.messages = messages;
}

// A command line ("/save x.json"); returns false for /exit.
bool command(Conversation& c, const std::string& line) {
  const size_t sp = line.find(' ');
  const std::string name = line.substr(0, sp), arg = sp == std::string::npos ? "" : line.substr(sp + 1);
  auto need_arg = [&] {
    if (arg.empty()) fail(name, ": give a FILE");
  };
  if (name == "/exit" || name == "/quit" || name == "/bye") return false;
  if (name == "/help" || name == "/?") {
    std::fputs(kHelp, stdout);
  } else if (name == "/reset" || name == "/clear") {
    c.reset();
    std::puts("(history cleared)");
  } else if (name == "/system") {
    c.set_system(arg);
    std::puts(arg.empty() ? "(system message removed)" : "(system message set)");
  } else if (name == "/save") {
    need_arg();
    save(c, arg);
    std::printf("(saved %zu messages to %s)\n", c.messages.size(), arg.c_str());
  } else if (name == "/load") {
    need_arg();
    load(c, arg);
    std::printf("(loaded %zu messages from %s)\n", c.messages.size(), arg.c_str());
  } else {
    fail("unknown command ", name, " (/help lists them)");
  }
  std::fflush(stdout);
  return true;
}

void turn(const Loaded& l, Conversation& c, const std::string& text, const GenOptions& o, Sampler& sampler) {
  InterruptScope::clear();  // a Ctrl-C from before this message is not meant for its reply
  c.messages.push_back({{"role", "user"}, {"content", text}});
  try {
    ChatTurn t = run_chat_turn(l, c.messages, o, sampler);
    c.messages.push_back(t.message);
    if (t.gen.interrupted && !o.quiet) std::fputs("(reply stopped)\n", stderr);
    print_generation_notices(t.gen, o);
    if (o.stats) print_stats(t.gen.result.stats);
  } catch (const Error& e) {
    c.messages.erase(c.messages.size() - 1);  // the turn failed: forget it, keep chatting
    std::fprintf(stderr, "dsv4: error: %s\n", e.what());
  }
  InterruptScope::clear();
}

void chat(GenOptions& o) {
  // From the start: keys typed while the model loads, during a reply or a command, or while a prompt is
  // drawn wait for the prompt (the line editor's own cooked mode is the usual one whatever it finds).
  TypeAheadScope keys;
  Loaded l = load_model_and_tokenizer(o, "chat", o.ctx_size);
  if (!l.runner) return;  // a rank other than 0 of a TCP group: it made rank 0's calls
  print_verbose_header(l, o);
  Sampler sampler(o.sampling());
  const bool tty = isatty(STDIN_FILENO) && stdout_is_terminal();
  Conversation c;
  c.set_system(o.system);
  InterruptScope interrupts;
  Input input(tty);
  if (tty && !o.quiet)
    std::printf("dsv4 chat with %s. /help lists the commands, Ctrl-C stops a reply, Ctrl-D quits.\n", o.model.c_str());
  if (!o.file.empty()) turn(l, c, read_input_file(o.file), o, sampler);
  while (true) {
    LineEditor::Input in = input.next();
    keys.apply();  // the line editor left the terminal in cooked mode
    if (in.status == LineEditor::Status::End) break;
    if (in.status == LineEditor::Status::Interrupted) {
      std::fputs("\n(Ctrl-D or /exit quits)\n", stdout);
      continue;
    }
    if (in.text.empty()) continue;
    if (in.text[0] == '/' && in.text.compare(0, 2, "//") != 0) {
      try {
        if (!command(c, in.text)) break;
      } catch (const Error& e) {
        std::fprintf(stderr, "dsv4: error: %s\n", e.what());
      }
      continue;
    }
    turn(l, c, in.text[0] == '/' ? in.text.substr(1) : in.text, o, sampler);
  }
  if (tty) std::puts("");
}

}  // namespace

void register_chat(CLI::App& app) {
  auto o = std::make_shared<GenOptions>();
  CLI::App* c = app.add_subcommand("chat", "Interactive multi-turn chat (/help, Ctrl-C stops a reply, Ctrl-D quits)");
  o->add_to(*c);
  c->get_option("--file")->description("Send FILE ('-': stdin) as the first message");
  c->callback([o] { chat(*o); });
}

}  // namespace dsv4::cli
