// What every route needs: the engine, the tokenizer, the served model's name, and the server's own
// state (draining at shutdown, request counters).
#pragma once
#include <atomic>
#include <cstdint>
#include <string>

#include "grammar/grammar_cache.h"
#include "runtime/engine.h"
#include "server/metrics.h"
#include "server/parse_context.h"
#include "tokenizer/tokenizer.h"

namespace dsv4::server {

struct ServerContext {
  ServerContext(Engine& e, const Tokenizer& t, std::string name);

  Engine& engine;
  const Tokenizer& tok;
  std::string model_name;  // the id clients pass as "model"
  int64_t created;         // unix time the server started (for /v1/models)
  std::atomic<bool> draining{false};  // shutting down: new requests are refused with 503
  bool webui = true;                  // serve the chat page at / (off: dsv4 serve --no-webui)
  HttpCounters http;
  mutable grammar::GrammarCache grammars;  // structured output (server/structured_output.h)

  ParseContext parsing() const { return {tok, model_name, engine.max_context(), &grammars}; }
};

}  // namespace dsv4::server
