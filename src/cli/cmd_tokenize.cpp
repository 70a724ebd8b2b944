// dsv4 tokenize: text -> token ids (no BOS added) with the model's tokenizer.json, or ids -> text.
//   dsv4 tokenize [-m DIR] --text S | --file F [--json]    ids separated by spaces, or a JSON array
//   dsv4 tokenize [-m DIR] --decode 1,2,3                  the decoded bytes, exactly (a newline added on a terminal)
#include <CLI/CLI.hpp>

#include <cstdio>
#include <fstream>
#include <iostream>
#include <sstream>

#include "cli/cli_io.h"
#include "cli/commands.h"
#include "cli/flags.h"
#include "core/error.h"
#include "tokenizer/tokenizer.h"

namespace dsv4::cli {
namespace {


// "1,2,3", "1 2 3" or "[1, 2, 3]".
std::vector<int32_t> parse_id_list(const std::string& s) {
  std::vector<int32_t> ids;
  std::string tok;
  auto flush = [&] {
    if (tok.empty()) return;
    size_t used = 0;
    long long v = 0;
    try {
      v = std::stoll(tok, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used != tok.size() || v < 0 || v > INT32_MAX) fail("--decode: \"", tok, "\" is not a token id");
    ids.push_back(int32_t(v));
    tok.clear();
  };
  for (char c : s) {
    if (c == ',' || c == ' ' || c == '\t' || c == '\n' || c == '[' || c == ']')
      flush();
    else
      tok += c;
  }
  flush();
  return ids;
}

struct TokenizeArgs {
  std::string model = default_model_dir();
  std::string text, file, decode;
  bool json = false;
};

void run_tokenize(const TokenizeArgs& a, bool have_text) {
  Tokenizer tok = Tokenizer::load(a.model);
  if (!a.decode.empty()) {
    write_text(tok.decode(parse_id_list(a.decode)));
    return;
  }
  if (!have_text && a.file.empty()) fail("tokenize: give --text, --file or --decode");
  print_ids(tok.encode(have_text ? a.text : read_input_file(a.file)), a.json);
}

}  // namespace

void register_tokenize(CLI::App& app) {
  auto a = std::make_shared<TokenizeArgs>();
  CLI::App* c = app.add_subcommand("tokenize", "Text to token ids (no BOS added), or ids back to text");
  c->add_option("-m,--model", a->model, "Model directory with tokenizer.json (default: the bundled model)")
      ->check(existing_dir());
  auto* text = c->add_option("--text", a->text, "Text to tokenize");
  auto* file = c->add_option("--file", a->file, "File to tokenize ('-' for stdin)");
  auto* dec = c->add_option("--decode", a->decode, "Token ids to decode, e.g. 1,2,3");
  text->excludes(file)->excludes(dec);
  file->excludes(dec);
  c->add_flag("--json", a->json, "Print the ids as a JSON array")->excludes(dec);
  c->callback([a, text] { run_tokenize(*a, text->count() > 0); });
}

}  // namespace dsv4::cli
