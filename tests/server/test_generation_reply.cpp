// What a generation route answers, pulled from its ReplyStream as the HTTP layer does, on the bundled
// model: OpenAI's usage rules for streams on both routes, and failed generations that carry their real
// status (a non-stream 5xx with the error alone; a stream's error event with its code, then [DONE]).
#include <gtest/gtest.h>

#include <chrono>
#include <sstream>
#include <thread>

#include "server/generation_reply.h"
#include "server/routes.h"
#include "support/bundled_model.h"

namespace dsv4::server {
namespace {

using namespace std::chrono_literals;

struct Pulled {
  int status = 0;
  std::string body;
};

// Pulls a reply to its end, as the HTTP layer does (fails the test after `limit`).
Pulled pull(const Reply& r, std::chrono::seconds limit = 60s) {
  Pulled p{r.status, r.body};
  if (!r.stream) return p;
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (r.stream->next(p.body, 50ms))
    if (std::chrono::steady_clock::now() > deadline) {
      ADD_FAILURE() << "the reply did not end within " << limit.count() << " s";
      break;
    }
  if (r.stream->final_status() != 0) p.status = r.stream->final_status();
  return p;
}

// The JSON events of an SSE body; checks that it ends with exactly one "data: [DONE]".
std::vector<Json> sse_events(const std::string& body) {
  std::vector<Json> out;
  std::istringstream in(body);
  bool done = false;
  for (std::string line; std::getline(in, line);) {
    if (line.empty()) continue;
    EXPECT_EQ(line.rfind("data: ", 0), 0u) << line;
    EXPECT_FALSE(done) << "data after [DONE]";
    if (line == "data: [DONE]")
      done = true;
    else
      out.push_back(Json::parse(line.substr(6)));
  }
  EXPECT_TRUE(done) << body;
  return out;
}

using GenerationReplyTest = test::BundledModelTest;

const std::string kChat = R"("messages": [{"role": "user", "content": "Hello"}], "temperature": 0)";
const std::string kCompletion = R"("prompt": "ROMEO:", "temperature": 0)";

Reply call(ServerContext& ctx, bool chat, const std::string& fields) {
  const ApiRequest req{"{" + (chat ? kChat : kCompletion) + ", " + fields + "}", ""};
  return chat ? handle_chat_completions(ctx, req) : handle_completions(ctx, req);
}

TEST_F(GenerationReplyTest, StreamsFollowOpenAisUsageRules) {
  Engine engine(*model_, *tok_);
  ServerContext ctx(engine, *tok_, "tiny-shakespeare");
  for (bool chat : {true, false}) {
    SCOPED_TRACE(chat ? "chat" : "completions");
    // Without include_usage: no chunk has a usage field, not even the finish chunk.
    const Pulled plain = pull(call(ctx, chat, R"("max_tokens": 5, "ignore_eos": true, "stream": true)"));
    ASSERT_EQ(plain.status, 200);
    int finish_chunks = 0;
    for (const Json& e : sse_events(plain.body)) {
      EXPECT_FALSE(e.contains("usage")) << e.dump();
      ASSERT_EQ(e["choices"].size(), 1u);
      finish_chunks += !e["choices"][0]["finish_reason"].is_null();
    }
    EXPECT_EQ(finish_chunks, 1);
    // With it: "usage": null on every chunk but the last, which has empty choices and the counts.
    const Pulled with = pull(call(ctx, chat, R"("max_tokens": 5, "ignore_eos": true, "stream": true,
                                                "stream_options": {"include_usage": true})"));
    ASSERT_EQ(with.status, 200);
    const std::vector<Json> events = sse_events(with.body);
    ASSERT_GE(events.size(), 3u);
    for (size_t i = 0; i + 1 < events.size(); ++i) {
      ASSERT_TRUE(events[i].contains("usage")) << events[i].dump();
      EXPECT_TRUE(events[i]["usage"].is_null()) << events[i].dump();
      EXPECT_EQ(events[i]["choices"].size(), 1u);
    }
    const Json& last = events.back();
    EXPECT_TRUE(last["choices"].is_array() && last["choices"].empty()) << last.dump();
    EXPECT_EQ(last["usage"]["completion_tokens"], 5);
    EXPECT_GT(last["usage"]["prompt_tokens"].get<int>(), 0);
    EXPECT_EQ(last["usage"]["total_tokens"],
              last["usage"]["prompt_tokens"].get<int>() + last["usage"]["completion_tokens"].get<int>());
    // Non-streamed: the usage is on the one object.
    const Pulled whole = pull(call(ctx, chat, R"("max_tokens": 5, "ignore_eos": true)"));
    ASSERT_EQ(whole.status, 200);
    EXPECT_EQ(Json::parse(whole.body)["usage"]["completion_tokens"], 5);
  }
}

TEST_F(GenerationReplyTest, FailedGenerationsCarryTheirStatus) {
  for (bool chat : {true, false}) {
    SCOPED_TRACE(chat ? "chat" : "completions");
    EngineOptions opt;
    opt.max_num_seqs = 1;
    Engine engine(*model_, *tok_, opt);
    ServerContext ctx(engine, *tok_, "tiny-shakespeare");
    // One running (to the end of the context, never done in time), one non-stream and one stream queued.
    Reply running = call(ctx, chat, R"("max_tokens": 60000, "ignore_eos": true)");
    Reply queued = call(ctx, chat, R"("max_tokens": 4)");
    Reply queued_stream = call(ctx, chat, R"("max_tokens": 4, "stream": true)");
    std::string ignored;
    for (int i = 0; i < 200 && engine.stats().generated_tokens == 0; ++i) running.stream->next(ignored, 50ms);
    ASSERT_GT(engine.stats().generated_tokens, 0u);
    engine.shutdown(0ms);
    for (Reply* r : {&running, &queued}) {
      const Pulled p = pull(*r);
      EXPECT_EQ(p.status, 503) << p.body;
      const Json j = Json::parse(p.body);  // the error alone: no half-written completion before it
      EXPECT_FALSE(j.contains("choices"));
      EXPECT_EQ(j["error"]["code"], "shutting_down");
      EXPECT_EQ(j["error"]["type"], "server_error");
    }
    const Pulled s = pull(queued_stream);
    EXPECT_EQ(s.status, 200);  // a stream's head went out already; its end says why
    const std::vector<Json> events = sse_events(s.body);
    ASSERT_FALSE(events.empty());
    EXPECT_EQ(events.back()["error"]["code"], "shutting_down") << s.body;
  }
}

TEST(GenerationError, EachReasonHasItsStatusAndCode) {
  using F = EngineEvent::FailReason;
  struct Case {
    F reason;
    int status;
    const char* code;
  };
  for (const Case& c : {Case{F::ShuttingDown, 503, "shutting_down"}, Case{F::Cancelled, 503, "cancelled"},
                        Case{F::Internal, 500, "internal_error"}}) {
    EngineEvent e;
    e.kind = EngineEvent::Kind::Failed;
    e.fail_reason = c.reason;
    e.text = "why";
    const ApiError err = generation_error(e);
    EXPECT_EQ(err.status, c.status);
    EXPECT_EQ(error_json(err)["error"]["code"], c.code);
    EXPECT_EQ(error_json(err)["error"]["type"], "server_error");
  }
}

}  // namespace
}  // namespace dsv4::server
