// What the prefix cache's multi-turn hits rest on (runtime/prefix_plan.h): turn n's prompt without its
// last token is a prefix of turn n+1's (its prompt + the answer + a new message). In chat mode the whole
// prompt is; in thinking mode (earlier reasoning dropped) the prompt ends with <think> where the next
// turn has </think> + the answer, so they agree up to that last token. The cache snapshots at the last
// multiple of 128 before a prompt's last token, so both modes hit.
#include <gtest/gtest.h>

#include "chat/encoder.h"

namespace {

using namespace dsv4::chat;
using oj = nlohmann::ordered_json;

std::string enc(const oj& messages, ThinkingMode mode) {
  EncodeOptions opt;
  opt.thinking_mode = mode;
  return encode_messages(messages, opt);
}

TEST(ChatPrefix, EachTurnExtendsThePreviousPromptUpToItsLastTag) {
  for (ThinkingMode mode : {ThinkingMode::Chat, ThinkingMode::Thinking}) {
    const std::string last_tag = mode == ThinkingMode::Chat ? "</think>" : "<think>";
    oj msgs = oj::array({{{"role", "system"}, {"content", "You are a careful assistant."}},
                         {{"role", "user"}, {"content", "What is a prefix cache?"}}});
    std::string prev = enc(msgs, mode);
    for (int turn = 1; turn <= 3; ++turn) {
      msgs.push_back({{"role", "assistant"},
                      {"content", "Answer " + std::to_string(turn) + "."},
                      {"reasoning_content", "Thinking about turn " + std::to_string(turn)}});
      msgs.push_back({{"role", "user"}, {"content", "And then " + std::to_string(turn) + "?"}});
      const std::string next = enc(msgs, mode);
      ASSERT_GE(prev.size(), last_tag.size());
      ASSERT_EQ(prev.substr(prev.size() - last_tag.size()), last_tag);
      const std::string kept = prev.substr(0, prev.size() - last_tag.size());
      EXPECT_EQ(next.substr(0, kept.size()), kept) << "turn " << turn << (mode == ThinkingMode::Chat ? " chat" : " thinking");
      if (mode == ThinkingMode::Chat) {
        EXPECT_EQ(next.substr(0, prev.size()), prev) << "turn " << turn;
      }
      prev = next;
    }
  }
}

}  // namespace
