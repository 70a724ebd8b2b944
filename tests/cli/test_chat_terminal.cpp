// dsv4 chat at a terminal (a pseudo-terminal) and through a pipe: Ctrl-C stops a reply and the session
// goes on, a bracketed paste of two lines is one message, history (arrow up, kept under
// $XDG_STATE_HOME across sessions), /save + /load round trip, /help and /system, '\' continuation.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <random>

#include "cli/pty_session.h"
#include "support/run_command.h"
#include "support/test_paths.h"

namespace dsv4 {
namespace {

namespace fs = std::filesystem;

class ChatTerminal : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("dsv4-chat-" + std::to_string(std::random_device{}()));
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string chat(const std::string& args) const {
    return "env XDG_STATE_HOME=" + (dir_ / "state").string() + " " + test::dsv4_binary() + " chat " + args;
  }
  nlohmann::json read_json(const std::string& name) const {
    std::ifstream in(dir_ / name);
    return nlohmann::json::parse(in);
  }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  fs::path dir_;
};

constexpr const char* kPrompt = "> ";
constexpr const char* kPasteOff = "\033[?2004l";  // printed as the line editor hands the line over
constexpr const char* kPasteOn = "\033[?2004h";   // printed before each prompt

TEST_F(ChatTerminal, CtrlCPasteHistoryAndSave) {
  test::PtySession s(chat("--temp 0 -n 1000"));
  ASSERT_TRUE(s.started());
  ASSERT_TRUE(s.expect("Ctrl-D quits.")) << s.output();
  ASSERT_TRUE(s.expect(kPrompt)) << s.output();

  // Ctrl-C once the reply streams: it stops, the session goes on.
  s.send("hello\r");
  ASSERT_TRUE(s.expect(kPasteOff)) << s.output();
  ASSERT_TRUE(s.expect("\n", 30)) << s.output();  // a line of the reply at least
  s.send("\003");
  ASSERT_TRUE(s.expect("(reply stopped)", 30)) << s.output();
  ASSERT_TRUE(s.expect(kPrompt)) << s.output();

  // The next turn works (a whole reply: up to EOS or -n).
  s.send("-n is long\r");
  ASSERT_TRUE(s.expect(kPasteOff)) << s.output();
  ASSERT_TRUE(s.expect(kPrompt, 120)) << s.output();

  // A bracketed paste of two lines (terminals send its newline as CR) is one message.
  s.send("\033[200~line one\rline two\033[201~\r");
  ASSERT_TRUE(s.expect(kPasteOff)) << s.output();
  ASSERT_TRUE(s.expect(kPrompt, 120)) << s.output();

  s.send("/save " + path("a.json") + "\r");
  ASSERT_TRUE(s.expect("(saved 6 messages to " + path("a.json") + ")")) << s.output();
  ASSERT_TRUE(s.expect(kPrompt)) << s.output();
  // History: arrow up brings back the /save line; Enter runs it again (to another file, edited).
  fs::remove(dir_ / "a.json");
  s.send("\033[A");
  ASSERT_TRUE(s.expect("/save " + path("a.json"))) << s.output();
  s.send("\r");
  ASSERT_TRUE(s.expect("(saved 6 messages to " + path("a.json") + ")")) << s.output();
  ASSERT_TRUE(s.expect(kPrompt)) << s.output();
  s.send("/exit\r");
  EXPECT_EQ(s.wait(), 0) << s.output();

  const auto j = read_json("a.json");
  ASSERT_TRUE(j.contains("messages")) << j.dump();
  const auto& m = j["messages"];
  ASSERT_EQ(m.size(), 6u) << j.dump(1);
  const char* roles[] = {"user", "assistant", "user", "assistant", "user", "assistant"};
  for (size_t i = 0; i < 6; ++i) EXPECT_EQ(m[i]["role"], roles[i]) << i;
  EXPECT_EQ(m[0]["content"], "hello");
  EXPECT_FALSE(m[1]["content"].get<std::string>().empty()) << "the stopped reply keeps what was said";
  EXPECT_EQ(m[2]["content"], "-n is long");
  EXPECT_EQ(m[4]["content"], "line one\nline two");
  // The history file holds the session's lines.
  std::ifstream h(dir_ / "state" / "dsv4" / "chat_history");
  const std::string hist((std::istreambuf_iterator<char>(h)), std::istreambuf_iterator<char>());
  EXPECT_NE(hist.find("hello"), std::string::npos) << hist;
}

TEST_F(ChatTerminal, LoadSaveRoundTripSystemHelpAndHistoryAcrossSessions) {
  const nlohmann::ordered_json conv = {
      {"messages",
       {{{"role", "system"}, {"content", "You are terse."}},
        {{"role", "user"}, {"content", "first question"}},
        {{"role", "assistant"}, {"content", "first answer"}}}}};
  std::ofstream(dir_ / "in.json") << conv.dump(2);
  {
    test::PtySession s(chat("-n 4"));
    ASSERT_TRUE(s.expect(kPrompt)) << s.output();
    s.send("/load " + path("in.json") + "\r");
    ASSERT_TRUE(s.expect("(loaded 3 messages from " + path("in.json") + ")")) << s.output();
    ASSERT_TRUE(s.expect(kPrompt)) << s.output();  // keys sent before the prompt meet a cooked terminal
    s.send("/save " + path("out.json") + "\r");
    ASSERT_TRUE(s.expect("(saved 3 messages")) << s.output();
    ASSERT_TRUE(s.expect(kPrompt)) << s.output();
    s.send("/help\r");  // answered by dsv4, not sent to the model
    ASSERT_TRUE(s.expect("/system TEXT")) << s.output();
    ASSERT_TRUE(s.expect(kPrompt)) << s.output();
    s.send("/system Speak in verse.\r");
    ASSERT_TRUE(s.expect("(system message set)")) << s.output();
    ASSERT_TRUE(s.expect(kPrompt)) << s.output();
    s.send("/save " + path("sys.json") + "\r");
    ASSERT_TRUE(s.expect("(saved 3 messages")) << s.output();
    ASSERT_TRUE(s.expect(kPrompt)) << s.output();
    s.send("/nonsense\r");
    ASSERT_TRUE(s.expect("dsv4: error: unknown command /nonsense (/help lists them)")) << s.output();
    ASSERT_TRUE(s.expect(kPrompt)) << s.output();
    s.send("\004");  // Ctrl-D on an empty line quits
    EXPECT_EQ(s.wait(), 0) << s.output();
  }
  EXPECT_EQ(read_json("out.json"), nlohmann::json::parse(conv.dump()));
  const auto sys = read_json("sys.json")["messages"];
  EXPECT_EQ(sys[0]["content"], "Speak in verse.");
  EXPECT_EQ(sys[1]["content"], "first question");
  // A new session: arrow up recalls the lines of the previous one, the last first.
  test::PtySession s(chat("-n 4"));
  ASSERT_TRUE(s.expect(kPrompt)) << s.output();
  s.send("\033[A");
  EXPECT_TRUE(s.expect("/nonsense")) << s.output();
  s.send("\033[A");
  EXPECT_TRUE(s.expect("/save " + path("sys.json"))) << s.output();
  s.send("\025/exit\r");  // Ctrl-U clears the recalled line
  EXPECT_EQ(s.wait(), 0) << s.output();
}

// Ctrl-C at the prompt abandons the line (the session goes on); keys typed during a reply are not
// echoed into it but wait, already typed, at the next prompt.
TEST_F(ChatTerminal, CtrlCAtThePromptAndTypeAhead) {
  test::PtySession s(chat("--temp 0 -n 200"));
  ASSERT_TRUE(s.expect(kPrompt)) << s.output();
  s.send("half typed\003");
  ASSERT_TRUE(s.expect("(Ctrl-D or /exit quits)")) << s.output();
  ASSERT_TRUE(s.expect(kPrompt)) << s.output();
  s.send("hi\r");
  ASSERT_TRUE(s.expect(kPasteOff)) << s.output();
  ASSERT_TRUE(s.expect("\n", 30)) << s.output();  // the reply streams
  s.send("typed ahead");
  const std::string at_prompt = std::string(kPasteOn) + "> typed ahead";
  ASSERT_TRUE(s.expect(at_prompt, 120)) << s.output();
  // Its first appearance is at the prompt: nothing of it was echoed into the reply.
  EXPECT_EQ(s.output().find("typed ahead"), s.output().find(at_prompt) + std::string(kPasteOn).size() + 2) << s.output();
  s.send("\025/exit\r");
  EXPECT_EQ(s.wait(), 0) << s.output();
}

// Keys typed before the first prompt (while the model loads) wait for it: a line and then Ctrl-D, which
// a terminal in line mode would keep as an end-of-file mark that the line editor never sees.
TEST_F(ChatTerminal, KeysTypedWhileLoadingWaitForThePrompt) {
  test::PtySession s(chat("-n 4"));
  ASSERT_TRUE(s.expect("loading")) << s.output();  // the load progress: the prompt is not drawn yet
  s.send("/save " + path("early.json") + "\r\004");
  EXPECT_EQ(s.wait(30), 0) << s.output();
  EXPECT_TRUE(fs::exists(dir_ / "early.json")) << s.output();
}

// Through a pipe the same commands work, and a line ending in '\' continues on the next.
TEST_F(ChatTerminal, PipeCommandsAndContinuation) {
  const std::string script = "/system Be brief.\n/help\nline a \\\nline b\n/save " + path("p.json") + "\n/reset\n/save " +
                             path("r.json") + "\n";
  std::ofstream(dir_ / "script.txt") << script;
  auto r = test::run_command(chat("--temp 0 -n 6 < " + path("script.txt") + " 2>/dev/null"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("(system message set)"), std::string::npos) << r.output;
  const auto p = read_json("p.json")["messages"];
  ASSERT_EQ(p.size(), 3u) << p.dump(1);
  EXPECT_EQ(p[0]["role"], "system");
  EXPECT_EQ(p[1]["content"], "line a \nline b");
  EXPECT_EQ(p[2]["role"], "assistant");
  // /reset keeps the system message only.
  EXPECT_EQ(read_json("r.json")["messages"], nlohmann::json::parse(R"([{"role": "system", "content": "Be brief."}])"));
}

}  // namespace
}  // namespace dsv4
