// What parsing a generation request needs of the server: the tokenizer, the served model's id and the
// context length. No engine, so that the request parsers also run alone (fuzz/fuzz_requests.cpp).
#pragma once
#include <cstdint>
#include <string_view>

#include "tokenizer/tokenizer.h"

namespace dsv4::grammar {
class GrammarCache;
}

namespace dsv4::server {

struct ParseContext {
  const Tokenizer& tok;
  std::string_view model_name;  // the id clients pass as "model"
  int64_t max_context;          // tokens of prompt + completion
  // Compiled grammars for structured output (server/structured_output.h); null (the fuzzer): schemas
  // are checked, no constraint is built.
  grammar::GrammarCache* grammars = nullptr;
};

}  // namespace dsv4::server
