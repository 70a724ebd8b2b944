// `dsv4 serve --speculative k` over HTTP: 8 concurrent greedy completions of prompts of several lengths
// give the texts of a plain server, for k = 1, 2, 3 (prefix cache on, as by default), and /metrics
// counts the drafts: accepted <= proposed, tokens of the rounds = accepted + verify steps, the
// acceptance rate their ratio; a plain server's counters stay zero.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <thread>

#include "server/http_client.h"
#include "server/serve_process.h"

namespace dsv4::test {
namespace {

using Json = nlohmann::ordered_json;

// 8 greedy completions at once (threads), `max_tokens` each without an early stop; their texts.
std::vector<std::string> complete_all(const ServeProcess& s) {
  const std::vector<std::string> prompts = {
      "ROMEO:\n", "JULIET:\nO Romeo, Romeo! wherefore art thou",
      "First Citizen:\nBefore we proceed any further, hear me speak.\n\nAll:\nSpeak, speak.\n\nFirst Citizen:\n",
      "KING HENRY:\nOnce more unto the breach, dear friends, once more;\nOr close the wall up with our English dead.\n",
      "M", "MENENIUS:\nWhat work's, my countrymen, in hand? where go you\nWith bats and clubs? The matter? speak, I pray you.\n",
      "DUKE VINCENTIO:\nOf government the properties to unfold,\n", "HAMLET:\nTo be, or not to be"};
  std::vector<std::string> out(prompts.size());
  std::vector<std::thread> ts;
  for (size_t i = 0; i < prompts.size(); ++i)
    ts.emplace_back([&, i] {
      const Json body = {{"prompt", prompts[i]}, {"max_tokens", 6 + 5 * int(i)}, {"temperature", 0}, {"ignore_eos", true}};
      const HttpReply r = http_request(s.port(), "POST", "/v1/completions", body.dump());
      const Json j = Json::parse(r.body, nullptr, false);
      if (r.status == 200 && j.is_object() && j.contains("choices")) out[i] = j["choices"][0]["text"].get<std::string>();
      else out[i] = "(status " + std::to_string(r.status) + ": " + r.body + ")";
    });
  for (auto& t : ts) t.join();
  return out;
}

TEST(ServeSpeculative, GreedyEqualsPlainOverHttp) {
#if defined(__SANITIZE_ADDRESS__)
  GTEST_SKIP() << "four servers, 32 completions: minutes under AddressSanitizer";
#endif
  std::vector<std::string> want;
  {
    ServeProcess s({"--max-num-seqs", "8"});
    want = complete_all(s);
    const std::string m = http_request(s.port(), "GET", "/metrics").body;
    EXPECT_EQ(metric(m, "dsv4_spec_drafts_per_step"), 0);
    EXPECT_EQ(metric(m, "dsv4_spec_draft_tokens_total"), 0);
    EXPECT_EQ(s.stop(), 0) << s.log();
  }
  for (const std::string& t : want) ASSERT_FALSE(t.empty() || t[0] == '(') << t;
  for (int k = 1; k <= 3; ++k) {
    SCOPED_TRACE(testing::Message() << "k " << k);
    ServeProcess s({"--max-num-seqs", "8", "--speculative", std::to_string(k), "--stats"});
    EXPECT_EQ(complete_all(s), want);
    const std::string m = http_request(s.port(), "GET", "/metrics").body;
    const double drafted = metric(m, "dsv4_spec_draft_tokens_total"), accepted = metric(m, "dsv4_spec_accepted_tokens_total");
    const double verifies = metric(m, "dsv4_spec_verify_steps_total"), tokens = metric(m, "dsv4_spec_tokens_total");
    EXPECT_EQ(metric(m, "dsv4_spec_drafts_per_step"), k);
    EXPECT_GT(verifies, 0) << m;
    EXPECT_LE(accepted, drafted);
    EXPECT_LE(drafted, k * verifies);
    EXPECT_EQ(tokens, accepted + verifies);
    EXPECT_NEAR(metric(m, "dsv4_spec_acceptance_rate"), accepted / drafted, 1e-6);
    // Every generated token: the 8 first tokens, the rounds' and the steps without a draft.
    EXPECT_EQ(metric(m, "dsv4_generation_tokens_total"), 8 + tokens + metric(m, "dsv4_spec_plain_steps_total")) << m;
    EXPECT_EQ(s.stop(), 0) << s.log();
    EXPECT_NE(s.log().find("speculative k " + std::to_string(k) + " |"), std::string::npos) << s.log();  // --stats
  }
}

TEST(ServeSpeculative, FlagsAreChecked) {
  for (const char* k : {"4", "-1", "x"})
    EXPECT_THROW(ServeProcess s({"--speculative", k}, std::chrono::seconds(10)), std::runtime_error) << k;
}

}  // namespace
}  // namespace dsv4::test
