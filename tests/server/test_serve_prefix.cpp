// The prefix cache through the real `dsv4 serve` (on by default): a three-turn chat over HTTP hits the
// earlier turns' snapshots and /metrics counts it, on one rank and over two data-parallel ranks; the
// greedy replies equal those of a server started with --no-prefix-cache, whose prefix metrics stay zero.
// Prompts of a few hundred tokens.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "server/http_client.h"
#include "server/serve_process.h"

namespace dsv4::test {
namespace {

using Json = nlohmann::ordered_json;

struct Turn {
  std::string reply;
  int64_t prompt_tokens = 0;
  int64_t cached_tokens = 0;  // usage.prompt_tokens_details.cached_tokens (absent: 0)
};

// A greedy chat completion of `messages` (8 tokens, no early stop).
Turn complete(int port, const Json& messages, const ServeProcess& s) {
  const Json body = {{"messages", messages}, {"max_tokens", 8}, {"temperature", 0}, {"ignore_eos", true}};
  const HttpReply r = http_request(port, "POST", "/v1/chat/completions", body.dump());
  EXPECT_EQ(r.status, 200) << r.body << "\n" << s.log();
  const Json j = Json::parse(r.body, nullptr, false);
  if (!j.is_object() || !j.contains("choices")) return {};
  const Json& u = j["usage"];
  return {j["choices"][0]["message"]["content"].get<std::string>(), u["prompt_tokens"].get<int64_t>(),
          u.contains("prompt_tokens_details") ? u["prompt_tokens_details"]["cached_tokens"].get<int64_t>() : 0};
}

// Three turns, each the conversation so far + the reply + a new user message.
std::vector<Turn> chat(const ServeProcess& s) {
  std::string system;
  for (int i = 0; i < 10; ++i)
    system += "Thou art a player in the court of the king, and thou speakest as the poets of old. ";
  Json messages = Json::array({{{"role", "system"}, {"content", system}},
                               {{"role", "user"}, {"content", "Tell me of the night, good sir."}}});
  std::vector<Turn> turns;
  for (const char* next : {"And what of the morning?", "Speak then of the sea."}) {
    turns.push_back(complete(s.port(), messages, s));
    messages.push_back({{"role", "assistant"}, {"content", turns.back().reply}});
    messages.push_back({{"role", "user"}, {"content", next}});
  }
  turns.push_back(complete(s.port(), messages, s));
  return turns;
}

std::string metrics(const ServeProcess& s) { return http_request(s.port(), "GET", "/metrics").body; }

TEST(ServePrefix, MultiTurnChatHitsAndRepliesEqualNoCache) {
#if defined(__SANITIZE_ADDRESS__)
  GTEST_SKIP() << "two servers, six chat requests of ~300 tokens: minutes under AddressSanitizer on 2 cores";
#endif
  std::vector<Turn> cold;
  {
    ServeProcess s({"--no-prefix-cache"});
    cold = chat(s);
    const std::string m = metrics(s);
    EXPECT_EQ(metric(m, "dsv4_prefix_cache_enabled"), 0);
    EXPECT_EQ(metric(m, "dsv4_prefix_cache_lookups_total"), 0);
    EXPECT_EQ(metric(m, "dsv4_prefix_cache_budget_bytes"), 0);
    EXPECT_EQ(s.stop(), 0) << s.log();
  }
  ASSERT_EQ(cold.size(), 3u);
  ASSERT_GT(cold[0].prompt_tokens, 256) << "the system prompt must span two 128-token blocks";

  // One rank, then two data-parallel ranks (each its own cache place of 64 MiB; a request goes to the
  // rank holding its prefix): the same hits, the replies of no cache.
  for (const char* ranks : {"1", "2"}) {
    SCOPED_TRACE(std::string("--ranks ") + ranks);
    ServeProcess s({"--prefix-cache-mib", "64", "--ranks", ranks});
    const std::vector<Turn> warm = chat(s);
    ASSERT_EQ(warm.size(), 3u);
    for (size_t t = 0; t < 3; ++t) {
      EXPECT_EQ(warm[t].reply, cold[t].reply) << "turn " << t;
      EXPECT_EQ(warm[t].prompt_tokens, cold[t].prompt_tokens) << "turn " << t;
    }
    const std::string m = metrics(s);
    EXPECT_EQ(metric(m, "dsv4_prefix_cache_enabled"), 1) << m;
    EXPECT_EQ(metric(m, "dsv4_prefix_cache_budget_bytes"), 64.0 * (1 << 20) * std::stoi(ranks));
    EXPECT_EQ(metric(m, "dsv4_prefix_cache_lookups_total"), 3);
    EXPECT_EQ(metric(m, "dsv4_prefix_cache_hits_total"), 2) << m;  // turns 1 and 2
    // Each later turn restores at least the system prompt's first 256 tokens.
    const double hit = metric(m, "dsv4_prefix_cache_hit_tokens_total");
    EXPECT_GE(hit, 2 * 256);
    EXPECT_EQ(int64_t(hit) % 128, 0);
    double prompts = 0, cached = 0;
    for (const Turn& t : warm) {
      prompts += double(t.prompt_tokens);
      cached += double(t.cached_tokens);
    }
    // usage.prompt_tokens_details.cached_tokens: none on turn 0 (and none without the cache), the hits after.
    EXPECT_EQ(warm[0].cached_tokens, 0);
    EXPECT_GE(warm[1].cached_tokens, 256);
    EXPECT_EQ(cached, hit);
    for (const Turn& t : cold) EXPECT_EQ(t.cached_tokens, 0);
    EXPECT_EQ(metric(m, "dsv4_prefix_cache_miss_tokens_total"), prompts - hit);
    EXPECT_GE(metric(m, "dsv4_prefix_cache_inserts_total"), 1);  // turn 0 at 256 at least
    EXPECT_EQ(metric(m, "dsv4_prefix_cache_evictions_total"), 0);
    EXPECT_GT(metric(m, "dsv4_prefix_cache_bytes"), 0);
    EXPECT_EQ(metric(m, "dsv4_prefix_cache_entries"), metric(m, "dsv4_prefix_cache_inserts_total"));
    EXPECT_EQ(metric(m, "dsv4_prefix_cache_snapshot_errors_total"), 0);
    EXPECT_EQ(s.stop(), 0) << s.log();
    if (std::string(ranks) == "2")
      EXPECT_NE(s.ready_text().find("prefix cache 64 MiB, 2 data-parallel ranks"), std::string::npos) << s.ready_text();
  }
}

TEST(ServePrefix, FlagsAreChecked) {
  // --prefix-cache-mib and --no-prefix-cache exclude each other; the budget is a positive number.
  for (const std::vector<std::string>& args :
       {std::vector<std::string>{"--no-prefix-cache", "--prefix-cache-mib", "8"}, {"--prefix-cache-mib", "0"},
        {"--prefix-cache-mib", "x"}}) {
    EXPECT_THROW(ServeProcess s(args, std::chrono::seconds(10)), std::runtime_error) << args.back();
  }
}

}  // namespace
}  // namespace dsv4::test
