// The real `dsv4 serve` over loopback against hostile and unlucky requests: JSON nested 100,000 deep
// (the body, tools, response_format, tool-call arguments) is a 400 naming the field and the server
// keeps serving; --max-tokens-limit is the default and the cap of generated tokens; SIGTERM during 24
// concurrent non-stream requests answers each with a complete 200 completion or a 503 error, never a
// 200 carrying an error.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <atomic>
#include <thread>

#include "server/http_client.h"
#include "server/serve_process.h"

namespace dsv4::test {
namespace {

using Json = nlohmann::ordered_json;
using namespace std::chrono_literals;

struct Answer {
  int status = 0;  // 0: no answer
  std::string body;
  Json json;
};

Answer request(int port, const std::string& method, const std::string& path, const std::string& body = "") {
  const HttpReply r = http_request(port, method, path, body);
  return {r.status, r.body, Json::parse(r.body, nullptr, false)};
}

std::string nested(int levels) { return std::string(size_t(levels), '[') + std::string(size_t(levels), ']'); }

TEST(ServeRequests, DeepNestingIsA400AndTheServerKeepsServing) {
  ServeProcess s({"--numerics", "reference"});
  const std::string user = R"("messages": [{"role": "user", "content": "x"}])";
  struct Case {
    const char* name;
    const char* path;
    std::string body, param;
  };
  const std::vector<Case> cases = {
      {"completions, top level", "/v1/completions", "{\"x\":" + nested(100000) + ",\"y\":1}", "x[0][0][0][0][0]"},
      {"chat, top level", "/v1/chat/completions", nested(90000), ""},
      {"tools", "/v1/chat/completions",
       "{" + user + R"(, "tools": [{"type": "function", "function": {"name": "f", "parameters": )" + nested(35000) +
           "}}]}",
       "tools[0].function.parameters[0][0]"},
      {"response_format", "/v1/chat/completions",
       "{" + user + R"(, "response_format": {"type": "json_schema", "json_schema": )" + nested(35000) + "}}",
       "response_format.json_schema[0][0][0][0]"},
      {"tool-call arguments", "/v1/chat/completions",
       R"({"messages": [{"role": "user", "content": "x"}, {"role": "assistant", "tool_calls": [{"type": "function",)"
       R"( "function": {"name": "f", "arguments": "{\"a\": )" + nested(35000) + "}\"}}]}]}",
       "messages[1].tool_calls[0].function.arguments"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const Answer a = request(s.port(), "POST", c.path, c.body);
    ASSERT_EQ(a.status, 400) << a.body << "\n" << s.log();
    ASSERT_TRUE(a.json.is_object()) << a.body;
    const Json& e = a.json["error"];
    EXPECT_EQ(e["type"], "invalid_request_error");
    if (c.param.empty()) {
      EXPECT_TRUE(e["param"].is_null()) << a.body;
    } else {
      EXPECT_EQ(e["param"], c.param) << a.body;
    }
    EXPECT_NE(e["message"].get<std::string>().find("deeper than 64 levels"), std::string::npos) << a.body;
    EXPECT_EQ(request(s.port(), "GET", "/health").status, 200);
  }
  const Answer ok = request(s.port(), "POST", "/v1/chat/completions", "{" + user + R"(, "max_tokens": 3})");
  ASSERT_EQ(ok.status, 200) << ok.body << "\n" << s.log();
  EXPECT_EQ(ok.json["usage"]["completion_tokens"], 3) << ok.body;
  EXPECT_EQ(s.stop(), 0) << s.log();
}

TEST(ServeRequests, MaxTokensLimitIsTheDefaultAndTheCap) {
  ServeProcess s({"--numerics", "reference", "--max-tokens-limit", "7"});
  const std::string chat = R"({"messages": [{"role": "user", "content": "Hi"}], "ignore_eos": true)";
  for (const std::string& extra : {std::string(), std::string(R"(, "max_tokens": 500)")}) {  // none given; more asked
    SCOPED_TRACE(extra);
    const Answer a = request(s.port(), "POST", "/v1/chat/completions", chat + extra + "}");
    ASSERT_EQ(a.status, 200) << a.body;
    EXPECT_EQ(a.json["usage"]["completion_tokens"], 7);
    EXPECT_EQ(a.json["choices"][0]["finish_reason"], "length");
  }
  const Answer fewer = request(s.port(), "POST", "/v1/chat/completions", chat + R"(, "max_tokens": 3})");
  EXPECT_EQ(fewer.json["usage"]["completion_tokens"], 3) << fewer.body;
  // Completions keep OpenAI's default of 16, cut at the cap too.
  const Answer c = request(s.port(), "POST", "/v1/completions", R"({"prompt": "ROMEO:", "ignore_eos": true})");
  EXPECT_EQ(c.json["usage"]["completion_tokens"], 7) << c.body;
  // Past the context is still a 400, before any cap.
  const Answer too_long =
      request(s.port(), "POST", "/v1/chat/completions", chat + R"(, "max_tokens": 65536})");
  EXPECT_EQ(too_long.status, 400) << too_long.body;
  EXPECT_EQ(too_long.json["error"]["code"], "context_length_exceeded");
  EXPECT_EQ(s.stop(), 0) << s.log();
}

TEST(ServeRequests, SigtermDuringNonStreamRequestsNeverAnswers200WithAnError) {
  // 4 run at once and may finish for 1 s; the ones waiting in the queue are failed at once.
  ServeProcess s({"--numerics", "reference", "--max-num-seqs", "4", "--shutdown-timeout", "1"});
  constexpr int kClients = 24;
  std::vector<Answer> answers(kClients);
  std::vector<std::thread> clients;
  auto submitted = [&] { return metric(request(s.port(), "GET", "/metrics").body, "dsv4_requests_submitted_total"); };
  // In this order: 2 short ones, answered before the others are sent (so that a finished request is
  // there whatever the machine's speed: under ASan on two busy cores 8 tokens can outlast the grace
  // period), then 4 that run past the grace period, then 18 that wait in the queue.
  constexpr int kShort = 2;
  for (int i = 0; i < kClients; ++i) {
    if (i == kShort) {
      for (std::thread& t : clients) t.join();
      clients.clear();
    }
    const std::string max_tokens = std::to_string(i < kShort ? 8 : 4000);
    const bool chat = i % 3 != 0;
    const std::string body =
        chat ? R"({"messages": [{"role": "user", "content": "Hi"}], "ignore_eos": true, "max_tokens": )" + max_tokens + "}"
             : R"({"prompt": "ROMEO:", "ignore_eos": true, "max_tokens": )" + max_tokens + "}";
    clients.emplace_back([&, i, chat, body] {
      answers[size_t(i)] = request(s.port(), "POST", chat ? "/v1/chat/completions" : "/v1/completions", body);
    });
    const auto deadline = std::chrono::steady_clock::now() + 30s;
    while (submitted() < i + 1 && std::chrono::steady_clock::now() < deadline) std::this_thread::sleep_for(5ms);
  }
  EXPECT_EQ(s.stop(SIGTERM), 0) << s.log();
  for (std::thread& t : clients) t.join();
  int completed = 0, refused = 0;
  for (int i = 0; i < kClients; ++i) {
    SCOPED_TRACE(i);
    const Answer& a = answers[size_t(i)];
    ASSERT_TRUE(a.json.is_object()) << a.status << "\n" << a.body;
    if (a.status == 200) {
      EXPECT_FALSE(a.json.contains("error")) << a.body;
      EXPECT_TRUE(a.json.contains("choices") && a.json["choices"].size() == 1) << a.body;
      EXPECT_TRUE(a.json.contains("usage") && a.json["usage"]["completion_tokens"].is_number()) << a.body;
      ++completed;
    } else {
      EXPECT_EQ(a.status, 503) << a.body;
      ASSERT_TRUE(a.json.contains("error")) << a.body;
      EXPECT_EQ(a.json["error"]["code"], "shutting_down") << a.body;
      EXPECT_FALSE(a.json.contains("choices"));
      ++refused;
    }
  }
  // Both outcomes happened: the short ones finished, the queued ones were failed.
  EXPECT_GE(completed, kShort);
  EXPECT_GT(refused, 0);
}

}  // namespace
}  // namespace dsv4::test
