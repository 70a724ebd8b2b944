// Completion texts for the parser tests beyond the fixtures: accepted ones with their expected
// message, and rejected ones. Shared by the batch and the streaming parser tests.
#pragma once
#include <optional>
#include <string>
#include <vector>

#include "chat/parser.h"

namespace dsv4::test {

struct ParseCase {
  std::string name;
  chat::ThinkingMode mode;
  std::string text;
  std::optional<chat::ParsedMessage> want;  // nullopt: must be rejected
};

inline std::vector<ParseCase> extra_parse_cases() {
  using chat::ParsedMessage;
  using chat::ThinkingMode;
  const std::string E = "<｜end▁of▁sentence｜>", TC = "\n\n<｜DSML｜tool_calls>\n", TCE = "</｜DSML｜tool_calls>";
  const std::string I = "<｜DSML｜invoke name=", IE = "</｜DSML｜invoke>\n", P = "<｜DSML｜parameter name=",
                    PE = "</｜DSML｜parameter>\n";
  auto msg = [](std::string reasoning, std::string content, std::vector<chat::ToolCall> calls = {}) {
    ParsedMessage m;
    m.reasoning_content = std::move(reasoning);
    m.content = std::move(content);
    m.tool_calls = std::move(calls);
    return std::optional<ParsedMessage>(m);
  };
  const auto T = ThinkingMode::Thinking, C = ThinkingMode::Chat;
  return {
      {"lookalike-markup-in-content", C, "a < b, c <｜not special｜> and </thinking ok" + E,
       msg("", "a < b, c <｜not special｜> and </thinking ok")},
      {"partial-think-end-in-reasoning", T, "a </thi b</think>c" + E, msg("a </thi b", "c")},
      {"multibyte-content", T, "思考😀</think>你好 😀 café" + E, msg("思考😀", "你好 😀 café")},
      {"string-value-needing-escapes", C,
       "x" + TC + I + "\"w\">\n" + P + "\"s\" string=\"true\">line1\n\"q\" a<b \\ é\t</｜DSML｜parameter>\n" + IE + TCE + E,
       msg("", "x", {{"w", "{\"s\": \"line1\\n\\\"q\\\" a<b \\\\ é\\t\"}"}})},
      {"invoke-without-parameters", T, "r</think>" + TC + I + "\"noargs\">\n" + IE + TCE + E,
       msg("r", "", {{"noargs", "{}"}})},
      {"value-ending-lt-newline", C, TC + I + "\"f\">\n" + P + "\"v\" string=\"false\">[1, 2]<\n/｜DSML｜parameter>\n" + IE + TCE + E,
       msg("", "", {{"f", "{\"v\": [1, 2]}"}})},
      {"whitespace-before-name", C, TC + "<｜DSML｜invoke \t name=\"f\">\n" + P + "\"a\" string=\"true\">1" + PE + IE + TCE + E,
       msg("", "", {{"f", "{\"a\": \"1\"}"}})},
      {"name-with-marker-like-text", C, TC + I + "\"f\">\n" + P + "\"k\" string=\"true\">v\" string=\"false\">w" + PE + IE + TCE + E,
       msg("", "", {{"f", "{\"k\": \"v\\\" string=\\\"false\\\">w\"}"}})},
      {"three-calls", C,
       "go" + TC + I + "\"a\">\n" + P + "\"x\" string=\"false\">1" + PE + P + "\"y\" string=\"false\">{\"z\": null}" + PE + IE +
           I + "\"b\">\n" + IE + I + "\"c\">\n" + P + "\"q\" string=\"true\">" + PE + IE + TCE + E,
       msg("", "go", {{"a", "{\"x\": 1, \"y\": {\"z\": null}}"}, {"b", "{}"}, {"c", "{\"q\": \"\"}"}})},
      {"tool-calls-without-eos", C, "x" + TC + I + "\"f\">\n" + IE + TCE, msg("", "x", {{"f", "{}"}})},
      {"text-ending-inside-invoke", C, "x" + TC + I + "\"f\">\n", msg("", "x", {{"f", "{}"}})},
      {"text-ending-after-block-start", C, "x\n\n<｜DSML｜tool_calls", msg("", "x")},
      {"empty-chat", C, E, msg("", "")},
      {"reject-missing-eos", C, "no end", std::nullopt},
      {"reject-text-after-eos", C, "done" + E + "more", std::nullopt},
      {"reject-bos-in-content", C, "a<｜begin▁of▁sentence｜>b" + E, std::nullopt},
      {"reject-think-end-in-chat-content", C, "a</think>b" + E, std::nullopt},
      {"reject-dsml-in-reasoning", T, "a｜DSML｜b</think>c" + E, std::nullopt},
      {"reject-eos-in-reasoning", T, "a" + E + "</think>c" + E, std::nullopt},
      {"reject-tool-calls-in-reasoning", T, "a" + TC + I + "\"f\">\n" + IE + TCE + E, std::nullopt},
      {"reject-duplicate-parameter", C, TC + I + "\"f\">\n" + P + "\"a\" string=\"true\">1" + PE + P + "\"a\" string=\"true\">2" + PE + IE + TCE + E, std::nullopt},
      {"reject-bad-string-flag", C, TC + I + "\"f\">\n" + P + "\"a\" string=\"maybe\">1" + PE + IE + TCE + E, std::nullopt},
      {"reject-missing-lt-before-param-end", C, TC + I + "\"f\">\n" + P + "\"a\" string=\"true\">1/｜DSML｜parameter>\n" + IE + TCE + E, std::nullopt},
      {"reject-missing-newline-after-block", C, "x\n\n<｜DSML｜tool_calls>" + I + "\"f\">\n" + IE + TCE + E, std::nullopt},
      {"reject-bad-invoke-name", C, TC + "<｜DSML｜invoke nam=\"f\">\n" + IE + TCE + E, std::nullopt},
      {"reject-content-after-tool-calls", C, TC + I + "\"f\">\n" + IE + TCE + "extra" + E, std::nullopt},
      {"reject-junk-between-invokes", C, TC + I + "\"f\">\n" + "</｜DSML｜invoke>\n\n" + TCE + E, std::nullopt},
      {"reject-missing-think-end", T, "thinking forever" + E, std::nullopt},
  };
}

}  // namespace dsv4::test
