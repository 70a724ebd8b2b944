#include "cli/chat_turn.h"

#include <cstdio>

#include "chat/encoder.h"
#include "chat/stream_parser.h"
#include "core/error.h"

namespace dsv4::cli {

ChatTurn run_chat_turn(const Loaded& l, const nlohmann::ordered_json& messages, const GenOptions& o, Sampler& sampler) {
  chat::EncodeOptions eo;
  eo.thinking_mode = o.thinking ? chat::ThinkingMode::Thinking : chat::ThinkingMode::Chat;
  if (!o.effort.empty()) eo.reasoning_effort = chat::parse_reasoning_effort(o.effort);
  const std::string prompt = chat::encode_messages(messages, eo);
  const bool dim_reasoning = o.color(), stream = !o.json;

  chat::StreamParser parser(eo.thinking_mode);
  bool in_reasoning = false;
  auto print = [&](const std::vector<chat::StreamEvent>& events) {
    for (const auto& e : events) {
      switch (e.kind) {
        case chat::StreamEventKind::ReasoningDelta:
          if (!in_reasoning && dim_reasoning) std::fputs("\033[2m", stdout);
          in_reasoning = true;
          std::fputs(e.text.c_str(), stdout);
          break;
        case chat::StreamEventKind::ContentDelta:
          if (in_reasoning) {
            std::fputs(dim_reasoning ? "\033[0m\n\n" : "\n\n", stdout);
            in_reasoning = false;
          }
          std::fputs(e.text.c_str(), stdout);
          break;
        case chat::StreamEventKind::ToolCallStart:
          std::printf("\n[tool call %s] ", e.text.c_str());
          break;
        case chat::StreamEventKind::ToolCallArgumentsDelta:
          std::fputs(e.text.c_str(), stdout);
          break;
        case chat::StreamEventKind::Done:
          break;
      }
    }
    std::fflush(stdout);
  };

  ChatTurn t;
  std::string reasoning, content;
  auto track = [&](const std::vector<chat::StreamEvent>& events) {
    for (const auto& e : events) {
      if (e.kind == chat::StreamEventKind::ReasoningDelta) reasoning += e.text;
      if (e.kind == chat::StreamEventKind::ContentDelta) content += e.text;
    }
    if (stream) print(events);
  };
  t.gen = generate_text(l, l.tok.encode(prompt), sampler, o, [&](const std::string& piece) { track(parser.feed(piece)); });
  const GenerationResult& r = t.gen.result;
  // The turn's end-of-sentence token ended generation: the parser expects its text.
  if (r.stop_id >= 0) track(parser.feed(l.tok.token_bytes(r.stop_id)));
  try {
    auto events = parser.finish();
    track(events);
    t.message = events.back().message.to_json();
  } catch (const Error& e) {
    // Cut by the token limit or by Ctrl-C, or a model that does not follow the format (the bundled tiny
    // model is not a chat model): keep what was said.
    if (r.finish != FinishReason::Length && !t.gen.interrupted && !o.quiet)
      std::fprintf(stderr, "\n(the completion is not a well-formed DeepSeek-V4 message: %s)", e.what());
    t.message = {{"role", "assistant"}, {"content", content.empty() ? r.text : content}};
    if (!reasoning.empty()) t.message["reasoning_content"] = reasoning;
  }
  if (!stream) {
    print_json_result(t.message.value("content", ""), t.message.value("reasoning_content", ""), t.gen);
    return t;
  }
  if (in_reasoning && dim_reasoning) std::fputs("\033[0m", stdout);
  std::fputs("\n", stdout);
  std::fflush(stdout);
  return t;
}

void print_json_result(const std::string& text, const std::string& reasoning, const CliGeneration& g) {
  const GenerationStats& s = g.result.stats;
  nlohmann::ordered_json j;
  j["text"] = text;
  if (!reasoning.empty()) j["reasoning_content"] = reasoning;
  j["finish_reason"] = g.interrupted ? "interrupted" : finish_reason_name(g.result.finish);
  j["context_full"] = g.context_full;
  j["stats"] = {{"prompt_tokens", s.prompt_tokens}, {"generated_tokens", s.generated_tokens},
                {"ttft_s", s.ttft_s},               {"prompt_tok_s", s.prompt_tok_s()},
                {"decode_tok_s", s.decode_tok_s()}};
  if (g.drafts > 0) {
    const SpeculativeStats& v = g.speculative;
    j["stats"]["speculative"] = {{"drafts", g.drafts},         {"verify_steps", v.rounds},
                                 {"plain_steps", v.plain_steps}, {"proposed", v.proposed},
                                 {"accepted", v.accepted},       {"acceptance", v.acceptance()},
                                 {"tokens_per_verify", v.tokens_per_verify()}};
  }
  const std::string out = j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
  std::fwrite(out.data(), 1, out.size(), stdout);
  std::fflush(stdout);
}

}  // namespace dsv4::cli
