// The real `dsv4 serve` over loopback, by raw HTTP: health, models, metrics; every error case answers
// OpenAI's error JSON with the right status and the server keeps serving; API keys; a full queue
// answers 503; a client that hangs up cancels its request and frees its cache; SIGTERM lets running
// requests finish (or cancels them after --shutdown-timeout) and exits with status 0.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cmath>

#include "server/http_client.h"
#include "server/serve_process.h"
#include "support/run_command.h"

namespace dsv4::test {
namespace {

using Json = nlohmann::ordered_json;
using namespace std::chrono_literals;

struct Answer {
  int status = 0;
  Json body;
  std::string text;
};

Answer answer(const HttpReply& r) {
  return {r.status, Json::parse(r.body, nullptr, false), r.body};
}

Answer post(int port, const std::string& path, const std::string& body, const Headers& h = {}) {
  return answer(http_request(port, "POST", path, body, h));
}

Answer get(int port, const std::string& path, const Headers& h = {}) { return answer(http_request(port, "GET", path, "", h)); }

const std::string kChat = R"({"messages": [{"role": "user", "content": "Hello"}], "max_tokens": 5, "temperature": 0})";

// Waits until the server's metrics satisfy `pred` (false after `limit`).
template <typename Pred>
bool wait_metrics(int port, Pred pred, std::chrono::seconds limit = 20s) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < deadline) {
    Answer m = get(port, "/metrics");
    if (m.status == 200 && pred(m.text)) return true;
    std::this_thread::sleep_for(20ms);
  }
  return false;
}

bool idle(const std::string& m) {
  return metric(m, "dsv4_running_sequences") == 0 && metric(m, "dsv4_cache_tokens_used") == 0 &&
         metric(m, "dsv4_queue_length") == 0;
}

class Http : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { server_ = new ServeProcess({"--numerics", "reference", "--max-num-seqs", "4"}); }
  static void TearDownTestSuite() {
    EXPECT_EQ(server_->stop(), 0) << server_->log();
    delete server_;
  }
  static int port() { return server_->port(); }
  static ServeProcess* server_;
};
ServeProcess* Http::server_ = nullptr;

TEST_F(Http, HealthModelsMetrics) {
  Answer h = get(port(), "/health");
  EXPECT_EQ(h.status, 200);
  EXPECT_EQ(h.body["status"], "ok");
  Answer m = get(port(), "/v1/models");
  ASSERT_EQ(m.status, 200);
  EXPECT_EQ(m.body["object"], "list");
  EXPECT_EQ(m.body["data"][0]["id"], "tiny-shakespeare");
  EXPECT_EQ(get(port(), "/v1/models/tiny-shakespeare").status, 200);
  Answer nm = get(port(), "/v1/models/gpt-4");
  EXPECT_EQ(nm.status, 404);
  EXPECT_EQ(nm.body["error"]["code"], "model_not_found");

  ASSERT_EQ(post(port(), "/v1/chat/completions", kChat).status, 200);
  Answer t = get(port(), "/metrics");
  ASSERT_EQ(t.status, 200);
  for (const char* name : {"dsv4_http_requests_total", "dsv4_requests_submitted_total", "dsv4_generation_tokens_total",
                           "dsv4_queue_length", "dsv4_running_sequences", "dsv4_batch_size", "dsv4_cache_usage_ratio",
                           "dsv4_time_to_first_token_seconds", "dsv4_inter_token_latency_seconds"})
    EXPECT_NE(t.text.find(std::string("# TYPE ") + name), std::string::npos) << name;
  EXPECT_GE(metric(t.text, "dsv4_generation_tokens_total"), 5);
  EXPECT_GE(metric(t.text, "dsv4_time_to_first_token_seconds_count"), 1);
  EXPECT_NE(t.text.find("route=\"/v1/chat/completions\",status=\"200\""), std::string::npos);
}

TEST_F(Http, ChatAndCompletions) {
  Answer c = post(port(), "/v1/chat/completions", kChat);
  ASSERT_EQ(c.status, 200) << c.text;
  EXPECT_EQ(c.body["object"], "chat.completion");
  EXPECT_EQ(c.body["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(c.body["usage"]["completion_tokens"], 5);
  EXPECT_FALSE(c.body["choices"][0]["message"]["content"].get<std::string>().empty());
  // The same greedy request streamed: the deltas add up to the same text.
  Json sreq = Json::parse(kChat);
  sreq["stream"] = true;
  Answer s = post(port(), "/v1/chat/completions", sreq.dump());
  ASSERT_EQ(s.status, 200);
  std::string text;
  std::istringstream in(s.text);
  for (std::string line; std::getline(in, line);)
    if (line.rfind("data: {", 0) == 0) text += Json::parse(line.substr(6))["choices"][0]["delta"].value("content", "");
  EXPECT_EQ(text, c.body["choices"][0]["message"]["content"]);
  EXPECT_NE(s.text.find("\"finish_reason\":\"length\""), std::string::npos);
  EXPECT_EQ(s.text.substr(s.text.size() - 14), "data: [DONE]\n\n");

  Answer p = post(port(), "/v1/completions", R"({"prompt": "ROMEO:", "max_tokens": 6, "temperature": 0})");
  ASSERT_EQ(p.status, 200) << p.text;
  EXPECT_EQ(p.body["object"], "text_completion");
  Answer ids = post(port(), "/v1/completions", R"({"prompt": [5, 6, 7], "max_tokens": 3, "temperature": 0})");
  EXPECT_EQ(ids.status, 200) << ids.text;
  EXPECT_EQ(ids.body["usage"]["prompt_tokens"], 3);
}

TEST_F(Http, ErrorsAnswerOpenAiJsonAndTheServerKeepsServing) {
  struct Case {
    const char* path;
    std::string body;
    int status;
    const char* param;  // "" = null
    const char* code;   // "" = null
  };
  std::string long_chat = R"({"messages": [{"role": "user", "content": ")";
  for (int i = 0; i < 70000; ++i) long_chat += "a ";
  long_chat += R"("}], "max_tokens": 4})";
  std::string long_ids = R"({"prompt": [)";
  for (int i = 0; i < 66000; ++i) long_ids += i ? ",5" : "5";
  long_ids += R"(], "max_tokens": 4})";
  const std::vector<Case> cases = {
      {"/v1/chat/completions", "{\"messages\": [", 400, "", ""},
      {"/v1/chat/completions", "[1, 2]", 400, "", ""},
      {"/v1/chat/completions", R"({"model": "tiny-shakespeare"})", 400, "messages", ""},
      {"/v1/chat/completions", R"({"messages": "Hello"})", 400, "messages", ""},
      {"/v1/chat/completions", R"({"messages": [{"role": "user", "content": "x"}], "max_tokens": "ten"})", 400, "max_tokens", ""},
      {"/v1/chat/completions", R"({"messages": [{"role": "user", "content": "x"}], "temperature": []})", 400, "temperature", ""},
      {"/v1/chat/completions", R"({"messages": [{"role": "user", "content": "x"}], "stream": 1})", 400, "stream", ""},
      {"/v1/chat/completions", R"({"messages": [{"role": 7, "content": "x"}]})", 400, "messages[0].role", ""},
      {"/v1/chat/completions", R"({"model": "gpt-4o", "messages": [{"role": "user", "content": "x"}]})", 404, "model",
       "model_not_found"},
      {"/v1/chat/completions", long_chat, 400, "messages", "context_length_exceeded"},
      {"/v1/chat/completions", R"({"messages": [{"role": "user", "content": "x"}], "max_tokens": 65536})", 400,
       "messages", "context_length_exceeded"},
      {"/v1/completions", long_ids, 400, "prompt", "context_length_exceeded"},
      {"/v1/completions", R"({"max_tokens": 3})", 400, "prompt", ""},
      {"/v1/completions", R"({"prompt": [1, "x"]})", 400, "prompt", ""},
      {"/v1/completions", R"({"prompt": [99999]})", 400, "prompt", ""},
      {"/v1/nothing", "{}", 404, "", ""},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(std::string(c.path) + " " + c.body.substr(0, 80));
    Answer a = post(port(), c.path, c.body);
    EXPECT_EQ(a.status, c.status) << a.text;
    ASSERT_TRUE(a.body.is_object() && a.body.contains("error")) << a.text;
    const Json& e = a.body["error"];
    EXPECT_TRUE(e["message"].is_string() && !e["message"].get<std::string>().empty());
    EXPECT_EQ(e["type"], c.status >= 500 ? "server_error" : "invalid_request_error");
    if (*c.param) {
      EXPECT_EQ(e["param"], c.param);
    } else {
      EXPECT_TRUE(e["param"].is_null());
    }
    if (*c.code) {
      EXPECT_EQ(e["code"], c.code);
    }
  }
  Answer wrong_method = get(port(), "/v1/chat/completions");
  EXPECT_EQ(wrong_method.status, 405);
  EXPECT_TRUE(wrong_method.body.contains("error"));
  // Still serving, and nothing is left running.
  EXPECT_EQ(get(port(), "/health").status, 200);
  EXPECT_EQ(post(port(), "/v1/chat/completions", kChat).status, 200);
  EXPECT_TRUE(wait_metrics(port(), idle));
}

TEST_F(Http, ClientThatHangsUpCancelsItsRequest) {
  const double cancelled = metric(get(port(), "/metrics").text, "dsv4_requests_cancelled_total");
  for (bool stream : {true, false}) {
    SCOPED_TRACE(stream ? "stream" : "non-stream");
    RawConnection conn(port());
    // No max_tokens: it would generate to the end of the 65536-token context.
    conn.post("/v1/chat/completions",
              std::string(R"({"messages": [{"role": "user", "content": "Hello"}], "stream": )") +
                  (stream ? "true" : "false") + "}");
    if (stream) {
      ASSERT_TRUE(conn.read_until("\"content\":\" ")) << conn.received();  // a generated token arrived
    } else {
      ASSERT_TRUE(wait_metrics(port(), [](const std::string& m) { return metric(m, "dsv4_running_sequences") == 1; }));
    }
    conn.hang_up();
    EXPECT_TRUE(wait_metrics(port(), idle)) << get(port(), "/metrics").text;
  }
  EXPECT_EQ(metric(get(port(), "/metrics").text, "dsv4_requests_cancelled_total"), cancelled + 2);
}

TEST_F(Http, PortInUseIsAnError) {
  auto r = run_command("timeout 60 " + dsv4_binary() + " serve --port " + std::to_string(port()));
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("cannot listen on 127.0.0.1:" + std::to_string(port())), std::string::npos) << r.output;
}

TEST(HttpOptions, ApiKey) {
  ServeProcess s({"--api-key", "sesame"});
  const Headers good = {{"Authorization", "Bearer sesame"}}, bad = {{"Authorization", "Bearer nope"}};
  Answer none = get(s.port(), "/v1/models");
  EXPECT_EQ(none.status, 401);
  EXPECT_EQ(none.body["error"]["code"], "invalid_api_key");
  EXPECT_EQ(get(s.port(), "/v1/models", bad).status, 401);
  EXPECT_EQ(post(s.port(), "/v1/chat/completions", kChat, bad).status, 401);
  EXPECT_EQ(get(s.port(), "/v1/models", good).status, 200);
  EXPECT_EQ(post(s.port(), "/v1/chat/completions", kChat, good).status, 200);
  EXPECT_EQ(get(s.port(), "/health").status, 200);
  EXPECT_EQ(get(s.port(), "/metrics").status, 200);
  EXPECT_EQ(s.stop(), 0) << s.log();
}

TEST(HttpOptions, FullQueueAnswers503) {
  ServeProcess s({"--max-num-seqs", "1", "--max-queue", "0"});
  RawConnection busy(s.port());
  busy.post("/v1/completions", R"({"prompt": "ROMEO:", "max_tokens": 60000, "stream": true})");
  ASSERT_TRUE(busy.read_until("\"text\""));
  Answer a = post(s.port(), "/v1/completions", R"({"prompt": "JULIET:", "max_tokens": 2})");
  EXPECT_EQ(a.status, 503) << a.text;
  EXPECT_EQ(a.body["error"]["type"], "server_error");
  EXPECT_EQ(a.body["error"]["code"], "overloaded");
  busy.hang_up();
  ASSERT_TRUE(wait_metrics(s.port(), idle));
  EXPECT_EQ(post(s.port(), "/v1/completions", R"({"prompt": "JULIET:", "max_tokens": 2})").status, 200);
  EXPECT_EQ(s.stop(), 0) << s.log();
}

TEST(HttpOptions, SigtermFinishesRunningRequestsAndExitsCleanly) {
  ServeProcess s({"--shutdown-timeout", "30"});
  RawConnection short_one(s.port());
  short_one.post("/v1/completions", R"({"prompt": "ROMEO:", "max_tokens": 40, "stream": true})");
  ASSERT_TRUE(short_one.read_until("\"text\""));
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_EQ(s.stop(SIGTERM), 0) << s.log();
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 20s);
  EXPECT_TRUE(short_one.read_until("data: [DONE]", 5s)) << short_one.received();
  EXPECT_NE(short_one.received().find("\"finish_reason\":\"length\""), std::string::npos);
}

TEST(HttpOptions, SigtermCancelsWhatDoesNotFinishInTime) {
  ServeProcess s({"--shutdown-timeout", "0.5"});
  RawConnection endless(s.port());
  endless.post("/v1/completions", R"({"prompt": "ROMEO:", "stream": true, "max_tokens": 60000})");
  ASSERT_TRUE(endless.read_until("\"text\""));
  EXPECT_EQ(s.stop(SIGINT), 0) << s.log();
  EXPECT_TRUE(endless.read_until("data: [DONE]", 5s)) << endless.received();
  EXPECT_NE(endless.received().find("\"error\""), std::string::npos);
}

}  // namespace
}  // namespace dsv4::test
