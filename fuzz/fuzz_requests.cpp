// libFuzzer target: arbitrary bytes as the body of POST /v1/chat/completions and /v1/completions,
// through the parsers the routes use: the body (nesting bounded), the shared generation fields, the
// chat messages, tools, tool_choice, response_format and template switches, the chat encoder (JSON
// tool-call arguments parsed again, Python-style dumps) and the tokenizer. Each must give a request or
// an ApiError 4xx with a one-line message; another exception, a crash or a sanitizer report is a
// finding.
#include <cstddef>
#include <cstdint>
#include <string>

#include "server/api_error.h"
#include "server/chat_request.h"
#include "server/fields.h"
#include "server/generation_params.h"

namespace {

const dsv4::Tokenizer* tokenizer = nullptr;

void check(const dsv4::server::ApiError& e) {
  const std::string m = e.what();
  if (e.status < 400 || e.status >= 500 || m.empty() || m.find('\n') != std::string::npos || m.size() > 500)
    __builtin_trap();
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  tokenizer = new dsv4::Tokenizer(dsv4::Tokenizer::load(DSV4_FUZZ_MODEL_DIR));
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace dsv4::server;
  const std::string text(reinterpret_cast<const char*>(data), size);
  const ParseContext pc{*tokenizer, "tiny-shakespeare", 4096, nullptr};  // no grammar cache: schemas checked only
  Json body;
  try {
    body = parse_body(text);
  } catch (const ApiError& e) {
    check(e);
    return 0;
  }
  try {
    const ChatRequest r = parse_chat_request(body, pc);
    if (r.gen.req.prompt.empty() || r.prompt.empty()) __builtin_trap();  // the encoder always writes the BOS
  } catch (const ApiError& e) {
    check(e);
  }
  try {
    const GenerationParams g = parse_completion_request(body, pc);
    if (g.req.stop.max_tokens < 1 || g.req.stop.max_tokens > pc.max_context) __builtin_trap();
  } catch (const ApiError& e) {
    check(e);
  }
  return 0;
}
