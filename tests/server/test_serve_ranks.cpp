// `dsv4 serve --ranks N` (issue 16): the engine's sequences spread over N data-parallel in-process
// ranks, each holding its own sequences and half of the routed experts. Six concurrent completions of
// different lengths over HTTP give the text of `--ranks 1`;
// a rank count that does not split the experts stops the server before it listens, with one line.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <future>

#include "server/http_client.h"
#include "server/serve_process.h"
#include "support/run_command.h"

namespace dsv4::test {
namespace {

using Json = nlohmann::ordered_json;

// The greedy texts of six completions sent at once.
std::vector<std::string> texts(const ServeProcess& s) {
  const std::vector<std::string> prompts = {"ROMEO:\n", "JULIET:\nO Romeo, Romeo, wherefore art thou",
                                            "KING HENRY:\nOnce more unto the breach", "A",
                                            "First Citizen:\nBefore we proceed any further, hear me speak.",
                                            "HAMLET:\nTo be, or not to be"};
  std::vector<std::future<std::string>> replies;
  for (size_t i = 0; i < prompts.size(); ++i)
    replies.push_back(std::async(std::launch::async, [&s, &prompts, i] {
      const Json body = {{"prompt", prompts[i]}, {"max_tokens", 8 + 4 * int(i)}, {"temperature", 0},
                         {"ignore_eos", true}};
      const HttpReply r = http_request(s.port(), "POST", "/v1/completions", body.dump());
      EXPECT_EQ(r.status, 200) << r.body << "\n" << s.log();
      const Json j = Json::parse(r.body, nullptr, false);
      if (!j.is_object() || !j.contains("choices")) return std::string();
      EXPECT_EQ(j["usage"]["completion_tokens"], 8 + 4 * int(i)) << r.body;
      return j["choices"][0]["text"].get<std::string>();
    }));
  std::vector<std::string> out;
  for (auto& r : replies) out.push_back(r.get());
  return out;
}

TEST(ServeRanks, TwoRanksGiveOneRanksText) {
  std::vector<std::string> one;
  {
    ServeProcess s({"--device", "cpu", "--ranks", "1", "--max-num-seqs", "6"});
    one = texts(s);
    EXPECT_EQ(s.stop(), 0) << s.log();
  }
  for (const std::string& t : one) EXPECT_FALSE(t.empty());
  ServeProcess s({"--device", "cpu", "--ranks", "2", "--max-num-seqs", "6"});
  EXPECT_EQ(texts(s), one);
  EXPECT_EQ(s.stop(), 0) << s.log();
}

// --speculative over 2 data-parallel ranks (each rank's speculative rounds on its own sequences, the other
// rank mirroring their calls, the MTP block's included); greedy speculative text is greedy text.
TEST(ServeRanks, SpeculativeOverTwoRanksGivesOneRanksText) {
  std::vector<std::string> one;
  {
    ServeProcess s({"--device", "cpu", "--ranks", "1", "--max-num-seqs", "6"});
    one = texts(s);
    EXPECT_EQ(s.stop(), 0) << s.log();
  }
  ServeProcess s({"--device", "cpu", "--ranks", "2", "--max-num-seqs", "6", "--speculative", "2"});
  EXPECT_NE(s.ready_text().find("speculative k 2, 2 data-parallel ranks"), std::string::npos)
      << s.ready_text();
  EXPECT_EQ(texts(s), one);
  EXPECT_EQ(s.stop(), 0) << s.log();
}

TEST(ServeRanks, RanksThatDoNotSplitTheExpertsFailWithOneLine) {
  const CommandResult r = run_command(dsv4_binary() + " serve --device cpu --port 0 --ranks 3");
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("8 routed experts do not split evenly over 3 ranks"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("http://"), std::string::npos) << r.output;
  EXPECT_EQ(std::count(r.output.begin(), r.output.end(), '\n'), 1) << r.output;
}

}  // namespace
}  // namespace dsv4::test
