#include "server/openai_format.h"

#include <chrono>
#include <random>

namespace dsv4::server {

const char* const kSseDone = "data: [DONE]\n\n";

std::string new_id(const std::string& prefix) {
  thread_local std::mt19937_64 rng{std::random_device{}()};
  static const char* hex = "0123456789abcdef";
  std::string id = prefix;
  for (int i = 0; i < 24; ++i) id += hex[rng() & 15];
  return id;
}

int64_t unix_time() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

Json usage_json(int64_t prompt_tokens, int64_t completion_tokens, int64_t cached_tokens) {
  Json u = {{"prompt_tokens", prompt_tokens},
            {"completion_tokens", completion_tokens},
            {"total_tokens", prompt_tokens + completion_tokens}};
  if (cached_tokens > 0) u["prompt_tokens_details"] = {{"cached_tokens", cached_tokens}};
  return u;
}

namespace {

Json byte_list(const std::string& s) {
  Json b = Json::array();
  for (unsigned char c : s) b.push_back(int(c));
  return b;
}

}  // namespace

Json chat_logprob(const Tokenizer& tok, int32_t id, const Logprobs& lp) {
  const std::string text = tok.token_bytes(id);
  Json top = Json::array();
  for (const auto& [tid, l] : lp.top) {
    const std::string t = tok.token_bytes(tid);
    top.push_back({{"token", t}, {"logprob", l}, {"bytes", byte_list(t)}});
  }
  return {{"token", text}, {"logprob", lp.chosen}, {"bytes", byte_list(text)}, {"top_logprobs", std::move(top)}};
}

void CompletionLogprobs::add(const Tokenizer& tok, int32_t id, const Logprobs& lp, int64_t text_offset) {
  tokens_.push_back(tok.token_bytes(id));
  logprobs_.push_back(lp.chosen);
  Json top = Json::object();
  for (const auto& [tid, l] : lp.top) top[tok.token_bytes(tid)] = l;
  top_.push_back(std::move(top));
  offsets_.push_back(text_offset);
}

Json CompletionLogprobs::take() {
  Json j = {{"tokens", std::move(tokens_)},
            {"token_logprobs", std::move(logprobs_)},
            {"top_logprobs", std::move(top_)},
            {"text_offset", std::move(offsets_)}};
  tokens_ = logprobs_ = top_ = offsets_ = Json::array();
  return j;
}

std::string sse_event(const Json& data) { return "data: " + dump_json(data) + "\n\n"; }

}  // namespace dsv4::server
