// dsv4 run, perplexity and chat through the real binary: the bundled model's golden greedy text and
// perplexity (reference numerics), seeds, stop strings, the interactive chat driven through a pipe.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>

#include "support/run_command.h"
#include "support/test_paths.h"

namespace dsv4 {
namespace {

using test::run_command;

nlohmann::json golden() {
  std::ifstream in(test::source_dir() + "/models/tiny-shakespeare/golden.json");
  return nlohmann::json::parse(in);
}

// Runs `args` with stdout only (stderr discarded).
test::CommandResult run_stdout(const std::string& args) {
  return run_command(test::dsv4_binary() + " " + args + " 2>/dev/null");
}

TEST(Run, GreedyReproducesGoldenText) {
  auto r = run_command("printf 'ROMEO:\\n' | " + test::dsv4_binary() +
                       " run --temp 0 --raw --numerics reference -n 120 2>/dev/null");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(r.output, golden()["greedy"]["text"].get<std::string>() + "\n");
}

TEST(Run, NoArgumentsGeneratesFromTheBundledModel) {
  auto r = run_command(test::dsv4_binary() + " run -n 20 </dev/null");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_GT(r.output.size(), 10u) << r.output;
}

TEST(Run, SeedReproducesAndStopCuts) {
  auto a = run_stdout("run -n 40 --seed 5 --temp 0.9 ROMEO:");
  auto b = run_stdout("run -n 40 --seed 5 --temp 0.9 ROMEO:");
  auto c = run_stdout("run -n 40 --seed 6 --temp 0.9 ROMEO:");
  ASSERT_EQ(a.exit_code, 0);
  EXPECT_EQ(a.output, b.output);
  EXPECT_NE(a.output, c.output);
  // Stop at the first "the" of the seeded output: the text is cut right before it.
  const size_t at = a.output.find("the");
  ASSERT_NE(at, std::string::npos) << a.output;
  auto s = run_stdout("run -n 40 --seed 5 --temp 0.9 --stop the ROMEO:");
  EXPECT_EQ(s.output, a.output.substr(0, at) + "\n");
}

TEST(Run, StatsAndPipedPrompt) {
  auto r = run_command("printf 'KING:\\n' | " + test::dsv4_binary() + " run -n 8 --stats");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("tok/s | ttft"), std::string::npos) << r.output;
}

TEST(Perplexity, GoldenWindowNll) {
  if (!test::have_shared()) GTEST_SKIP();
  auto g = golden()["perplexity"];
  std::ifstream in(test::shared_dir() + "/data/tinyshakespeare.txt", std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string tail = ss.str().substr(g["text_offset_chars"].get<size_t>());
  const std::string path = (std::filesystem::temp_directory_path() / ("dsv4-ppl-" + std::to_string(std::random_device{}()))).string();
  std::ofstream(path) << tail;
  auto r = run_stdout("perplexity --numerics reference --window 1024 --limit " +
                      std::to_string(g["tokens"].get<int>()) + " --json -f " + path);
  std::filesystem::remove(path);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  auto j = nlohmann::json::parse(r.output);
  const double want = g["mean_nll"].get<double>();
  std::printf("    perplexity mean NLL %.7f vs golden %.7f\n", j["mean_nll"].get<double>(), want);
  EXPECT_LT(std::fabs(j["mean_nll"].get<double>() - want) / want, 1e-4);
  EXPECT_EQ(j["scored"].get<int>(), g["tokens"].get<int>() - 1);
}

TEST(Perplexity, BadInput) {
  auto r = run_command(test::dsv4_binary() + " perplexity -f /nonexistent/file.txt");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find("/nonexistent/file.txt: cannot open"), std::string::npos) << r.output;
}

TEST(Chat, TwoTurnsResetAndExitThroughAPipe) {
  // Greedy: the first turn's answer must come back identical after /reset (same history).
  auto r = run_stdout("chat --temp 0 -n 12 --numerics reference <<'EOF'\nhello there\nand then?\n/reset\nhello there\n/exit\nnever read\nEOF");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const size_t cleared = r.output.find("(history cleared)\n");
  ASSERT_NE(cleared, std::string::npos) << r.output;
  const std::string before = r.output.substr(0, cleared), after = r.output.substr(cleared + 18);
  EXPECT_FALSE(after.empty());
  EXPECT_EQ(before.substr(0, after.size()), after) << "first answer after /reset differs";
  EXPECT_GT(before.size(), after.size()) << "two turns before /reset";
}

TEST(Chat, EndsOnEndOfInput) {
  auto r = run_command("printf 'hi\\n' | " + test::dsv4_binary() + " chat -n 4");
  EXPECT_EQ(r.exit_code, 0) << r.output;
}

}  // namespace
}  // namespace dsv4
