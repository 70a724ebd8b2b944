// Structured output against a real `dsv4 serve` on the bundled model: response_format json_schema
// output validates, json_object parses, forced tool calls always call with valid arguments, strict
// tools under tool_choice "auto" are constrained, an unsupported schema feature is a 400 naming it, and
// a grammar that cannot finish ends with "length".
#include <gtest/gtest.h>

#include "grammar/schema_validator.h"
#include "server/http_client.h"
#include "server/serve_process.h"

namespace dsv4::test {
namespace {

using Json = nlohmann::ordered_json;

Json chat(int port, Json body) {
  body["messages"] = Json::array({{{"role", "user"}, {"content", "Answer in JSON."}}});
  const HttpReply r = http_request(port, "POST", "/v1/chat/completions", body.dump(),
                                   {{"Content-Type", "application/json"}}, std::chrono::seconds(180));
  Json out = Json::parse(r.body, nullptr, false);
  if (!out.is_object()) out = Json::object();
  out["status"] = r.status;
  return out;
}

class StructuredOutput : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { server_ = new ServeProcess({"--max-num-seqs", "4"}); }
  static void TearDownTestSuite() {
    delete server_;
    server_ = nullptr;
  }
  static int port() { return server_->port(); }
  static ServeProcess* server_;
};
ServeProcess* StructuredOutput::server_ = nullptr;

const Json kSchema = Json::parse(R"({"type":"object","properties":{"name":{"type":"string","maxLength":10},
  "age":{"type":"integer"},"tags":{"type":"array","items":{"enum":["a","b"]},"maxItems":3},
  "when":{"type":"string","format":"date"}},"required":["name","age","when"]})");

TEST_F(StructuredOutput, JsonSchemaOutputValidates) {
  int stopped = 0;
  for (int seed = 0; seed < 6; ++seed) {
    Json r = chat(port(), {{"max_tokens", 400}, {"seed", seed}, {"temperature", 1.0},
                           {"response_format", {{"type", "json_schema"}, {"json_schema", {{"name", "p"}, {"schema", kSchema}}}}}});
    ASSERT_EQ(r["status"], 200) << r.dump();
    const Json& choice = r["choices"][0];
    if (choice["finish_reason"] != "stop") continue;
    ++stopped;
    const std::string content = choice["message"]["content"].get<std::string>();
    Json v = Json::parse(content, nullptr, false);
    ASSERT_FALSE(v.is_discarded()) << content;
    EXPECT_EQ(validate(v, kSchema, kSchema), "") << content;
  }
  EXPECT_GE(stopped, 4);
}

TEST_F(StructuredOutput, JsonObjectParses) {
  for (int seed = 0; seed < 3; ++seed) {
    Json r = chat(port(), {{"max_tokens", 400}, {"seed", seed}, {"response_format", {{"type", "json_object"}}}});
    ASSERT_EQ(r["status"], 200) << r.dump();
    if (r["choices"][0]["finish_reason"] != "stop") continue;
    Json v = Json::parse(r["choices"][0]["message"]["content"].get<std::string>(), nullptr, false);
    EXPECT_TRUE(v.is_object()) << r.dump();
  }
}

const Json kTools = Json::parse(R"([
  {"type":"function","function":{"name":"weather","parameters":{"type":"object","properties":{
     "city":{"type":"string","maxLength":12},"days":{"type":"integer"},"unit":{"enum":["c","f"]}},
     "required":["city","days"]}}},
  {"type":"function","function":{"name":"add","strict":true,"parameters":{"type":"object","properties":{
     "xs":{"type":"array","items":{"type":"number"},"maxItems":4}},"required":["xs"]}}}])");

TEST_F(StructuredOutput, ForcedToolCallsAlwaysCallWithValidArguments) {
  auto schema_of = [](const std::string& name) {
    for (const Json& t : kTools)
      if (t["function"]["name"] == name) return t["function"]["parameters"];
    return Json();
  };
  // {tool_choice, parallel_tool_calls}: a single call must finish as a tool call; with parallel
  // calls the model may still be calling at max_tokens: every call but a cut last one validates.
  const std::pair<Json, bool> cases[] = {{"required", false}, {{{"type", "function"}, {"function", {{"name", "add"}}}}, true},
                                         {"required", true}};
  for (const auto& [tc, parallel] : cases)
    for (int seed = 0; seed < 2; ++seed) {
      Json r = chat(port(), {{"max_tokens", 400}, {"seed", seed}, {"tools", kTools}, {"tool_choice", tc},
                             {"parallel_tool_calls", parallel}});
      ASSERT_EQ(r["status"], 200) << r.dump();
      const Json& choice = r["choices"][0];
      const bool single = tc.is_object() || !parallel;
      if (single) {
        ASSERT_EQ(choice["finish_reason"], "tool_calls") << r.dump();
      }
      const Json& calls = choice["message"]["tool_calls"];
      ASSERT_TRUE(calls.is_array() && !calls.empty()) << r.dump();
      if (single) {
        EXPECT_EQ(calls.size(), 1u) << r.dump();
      }
      const size_t complete = choice["finish_reason"] == "tool_calls" ? calls.size() : calls.size() - 1;
      for (size_t i = 0; i < complete; ++i) {
        const Json& call = calls[i];
        const std::string name = call["function"]["name"];
        if (tc.is_object()) {
          EXPECT_EQ(name, "add");
        }
        const Json schema = schema_of(name);
        ASSERT_FALSE(schema.is_null()) << name;
        Json args = Json::parse(call["function"]["arguments"].get<std::string>(), nullptr, false);
        ASSERT_FALSE(args.is_discarded()) << call.dump();
        EXPECT_EQ(validate(args, schema, schema), "") << call.dump();
      }
    }
}

// tool_choice "auto" with a strict tool: the model may answer or call (the bundled model mostly
// answers); whatever it does parses (the DSML markup never leaks into the content), and a call of the
// strict tool validates. A strict tool's unsupported schema feature is a 400 naming it; a non-strict
// tool's schema is not compiled.
TEST_F(StructuredOutput, StrictToolsUnderAutoAnswerOrCallWithValidArguments) {
  for (int seed = 0; seed < 3; ++seed) {
    Json r = chat(port(), {{"max_tokens", 60}, {"seed", seed}, {"temperature", 1.0}, {"tools", kTools},
                           {"tool_choice", "auto"}});
    ASSERT_EQ(r["status"], 200) << r.dump();
    const Json& msg = r["choices"][0]["message"];
    if (msg.contains("content") && msg["content"].is_string()) {
      EXPECT_EQ(msg["content"].get<std::string>().find("｜DSML｜"), std::string::npos) << r.dump();
    }
    if (!msg.contains("tool_calls")) continue;
    for (const Json& call : msg["tool_calls"]) {
      if (call["function"]["name"] != "add") continue;
      Json args = Json::parse(call["function"]["arguments"].get<std::string>(), nullptr, false);
      const Json schema = kTools[1]["function"]["parameters"];
      EXPECT_EQ(validate(args, schema, schema), "") << call.dump();
    }
  }
  Json bad = kTools;
  bad[1]["function"]["parameters"]["properties"]["xs"]["uniqueItems"] = true;
  Json r = chat(port(), {{"max_tokens", 3}, {"tools", bad}, {"tool_choice", "auto"}});
  EXPECT_EQ(r["status"], 400) << r.dump();
  EXPECT_NE(r["error"]["message"].get<std::string>().find("'uniqueItems'"), std::string::npos) << r.dump();
  EXPECT_EQ(r["error"]["param"], "tools");
  bad[1]["function"]["strict"] = false;  // not strict: no grammar, no refusal
  r = chat(port(), {{"max_tokens", 3}, {"tools", bad}, {"tool_choice", "auto"}});
  EXPECT_EQ(r["status"], 200) << r.dump();
}

TEST_F(StructuredOutput, UnsupportedFeatureIs400NamingIt) {
  Json r = chat(port(), {{"response_format", {{"type", "json_schema"},
                                              {"json_schema", {{"name", "p"}, {"schema", {{"type", "integer"}, {"multipleOf", 3}}}}}}}});
  EXPECT_EQ(r["status"], 400);
  EXPECT_NE(r["error"]["message"].get<std::string>().find("'multipleOf'"), std::string::npos) << r.dump();
  EXPECT_EQ(r["error"]["param"], "response_format.json_schema.schema");
  Json bad_tool = kTools;
  bad_tool[0]["function"]["parameters"]["properties"]["days"]["minimum"] = 1;
  r = chat(port(), {{"tools", bad_tool}, {"tool_choice", "required"}});
  EXPECT_EQ(r["status"], 400);
  EXPECT_NE(r["error"]["message"].get<std::string>().find("'minimum'"), std::string::npos) << r.dump();
  // Still serving.
  r = chat(port(), {{"max_tokens", 3}});
  EXPECT_EQ(r["status"], 200);
}

TEST_F(StructuredOutput, GrammarThatCannotFinishEndsWithLength) {
  const Json schema = {{"type", "string"}, {"minLength", 40}};
  Json r = chat(port(), {{"max_tokens", 8},
                         {"response_format", {{"type", "json_schema"}, {"json_schema", {{"name", "s"}, {"schema", schema}}}}}});
  ASSERT_EQ(r["status"], 200) << r.dump();
  EXPECT_EQ(r["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(r["usage"]["completion_tokens"], 8);
}

}  // namespace
}  // namespace dsv4::test
