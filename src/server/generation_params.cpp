#include "server/generation_params.h"

#include <random>

#include "core/error.h"

namespace dsv4::server {

void check_model(const Fields& f, const ServerContext& ctx) {
  std::optional<std::string> model = f.string("model");
  if (model && *model != ctx.model_name)
    throw ApiError(404, cat("the model '", *model, "' does not exist; this server serves '", ctx.model_name, "'"),
                   "model", "model_not_found");
}

GenerationParams parse_generation_params(const Fields& f, const ServerContext& ctx, Endpoint ep) {
  const bool chat = ep == Endpoint::Chat;
  check_model(f, ctx);
  GenerationParams g;
  if (auto n = f.integer("n", 1, 128); n && *n != 1) f.invalid("n", "only n = 1 is supported");
  g.stream = f.boolean("stream").value_or(false);
  if (const Json* so = f.object("stream_options")) {
    if (!g.stream) f.invalid("stream_options", "only allowed with stream: true");
    g.include_usage = Fields(*so, f.path("stream_options")).boolean("include_usage").value_or(false);
  }

  const int64_t ctx_len = ctx.engine.max_context();
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
    if (auto eos = ctx.tok.eos_id()) g.req.stop.stop_ids.push_back(*eos);

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

}  // namespace dsv4::server
