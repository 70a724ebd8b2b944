#include "server/generation_params.h"

#include <random>

#include "core/error.h"
#include "io/json_text.h"

namespace dsv4::server {

void check_model(const Fields& f, const ParseContext& pc) {
  std::optional<std::string> model = f.string("model");
  if (model && *model != pc.model_name)
    throw ApiError(404, cat("the model '", json_text::printable(*model, 80), "' does not exist; this server serves '",
                            pc.model_name, "'"),
                   "model", "model_not_found");
}

GenerationParams parse_generation_params(const Fields& f, const ParseContext& pc, Endpoint ep) {
  const bool chat = ep == Endpoint::Chat;
  check_model(f, pc);
  GenerationParams g;
  if (auto n = f.integer("n", 1, 128); n && *n != 1) f.invalid("n", "only n = 1 is supported");
  g.stream = f.boolean("stream").value_or(false);
  if (const Json* so = f.object("stream_options")) {
    if (!g.stream) f.invalid("stream_options", "only allowed with stream: true");
    g.include_usage = Fields(*so, f.path("stream_options")).boolean("include_usage").value_or(false);
  }

  const int64_t ctx_len = pc.max_context;
  std::optional<int64_t> max_tokens = f.integer("max_tokens", 1, ctx_len);
  if (chat)
    if (auto m = f.integer("max_completion_tokens", 1, ctx_len)) max_tokens = m;
  g.req.stop.max_tokens = int(max_tokens.value_or(chat ? 0 : 16));

  SamplingParams& s = g.req.sampling;
  s.temperature = float(f.number("temperature", 0, 2).value_or(1));
  s.top_p = float(f.number("top_p", 0, 1).value_or(1));
  if (s.top_p <= 0) f.invalid("top_p", "must be greater than 0");
  s.top_k = int(f.integer("top_k", -1, 1 << 30).value_or(0));
  if (s.top_k < 0) s.top_k = 0;  // -1 is "off" in vLLM
  s.min_p = float(f.number("min_p", 0, 1).value_or(0));
  s.presence_penalty = float(f.number("presence_penalty", -2, 2).value_or(0));
  s.frequency_penalty = float(f.number("frequency_penalty", -2, 2).value_or(0));
  s.repetition_penalty = float(f.number("repetition_penalty", 0.01, 10).value_or(1));
  if (auto seed = f.integer("seed", INT64_MIN, INT64_MAX))
    s.seed = uint64_t(*seed);
  else
    s.seed = (uint64_t(std::random_device{}()) << 32) ^ std::random_device{}();

  for (std::string& stop : f.strings("stop"))
    if (!stop.empty()) g.req.stop.stop_strings.push_back(std::move(stop));
  if (!f.boolean("ignore_eos").value_or(false))
    if (auto eos = pc.tok.eos_id()) g.req.stop.stop_ids.push_back(*eos);

  if (chat) {
    const bool logprobs = f.boolean("logprobs").value_or(false);
    const auto top = f.integer("top_logprobs", 0, 20);
    if (top && !logprobs) f.invalid("top_logprobs", "needs logprobs: true");
    g.req.top_logprobs = logprobs ? int(top.value_or(0)) : -1;
  } else {
    const auto lp = f.integer("logprobs", 0, 20);
    g.req.top_logprobs = lp ? int(*lp) : -1;
  }
  return g;
}

namespace {

// "prompt": a string, token ids, or a one-element array of either.
std::vector<int32_t> prompt_ids(const Fields& f, const Tokenizer& tok) {
  const Json* p = f.get("prompt");
  if (!p) f.invalid("prompt", "required");
  if (p->is_array() && p->size() == 1 && ((*p)[0].is_string() || (*p)[0].is_array())) p = &(*p)[0];
  if (p->is_string()) return tok.encode(p->get<std::string>());
  if (!p->is_array()) f.invalid("prompt", cat("expected a string or an array of token ids, got ", p->type_name()));
  std::vector<int32_t> ids;
  for (const Json& v : *p) {
    if (v.is_string() || v.is_array()) f.invalid("prompt", "only one prompt per request is supported");
    if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() > INT32_MAX)
      f.invalid("prompt", "expected token ids (non-negative integers)");
    ids.push_back(int32_t(v.get<int64_t>()));
  }
  return ids;
}

}  // namespace

GenerationParams parse_completion_request(const Json& body, const ParseContext& pc) {
  Fields f(body);
  GenerationParams g = parse_generation_params(f, pc, Endpoint::Completions);
  if (f.boolean("echo").value_or(false)) f.invalid("echo", "echo is not supported");
  if (auto s = f.string("suffix"); s && !s->empty()) f.invalid("suffix", "suffix is not supported");
  if (auto b = f.integer("best_of", 1, 128); b && *b != 1) f.invalid("best_of", "only best_of = 1 is supported");
  g.req.prompt = prompt_ids(f, pc.tok);
  return g;
}

}  // namespace dsv4::server
