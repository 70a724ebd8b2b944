// dsv4 run --speculative k through the real binary on the bundled model (its trained mtp.0 drafts):
// greedy text identical to a plain run for k = 1..3, the --stats acceptance line and --json counters,
// seeded sampling reproducible, one-line refusals (penalties, grammars, k out of range, no MTP block).
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <regex>
#include <string>
#include <unistd.h>

#include "io/safetensors.h"
#include "support/run_command.h"
#include "support/test_paths.h"

namespace dsv4 {
namespace {

namespace fs = std::filesystem;
using test::run_command;

test::CommandResult run_stdout(const std::string& args) {
  return run_command(test::dsv4_binary() + " run " + args + " 2>/dev/null");
}

// Runs `dsv4 run ARGS` keeping stderr only.
test::CommandResult run_stderr(const std::string& args) {
  return run_command("{ " + test::dsv4_binary() + " run " + args + " 2>&1 >/dev/null; }");
}

bool one_line(const std::string& s) { return !s.empty() && s.find('\n') == s.size() - 1; }

TEST(SpeculativeRun, GreedyTextIsThePlainRunsForEveryK) {
  for (const char* prompt : {"ROMEO:", "'KING HENRY:\nWhat say you'"}) {
    const std::string args = std::string("--temp 0 -n 60 ") + prompt;
    const auto plain = run_stdout(args);
    ASSERT_EQ(plain.exit_code, 0) << plain.output;
    ASSERT_GT(plain.output.size(), 100u) << plain.output;
    for (int k = 1; k <= 3; ++k) {
      const auto spec = run_stdout("--speculative " + std::to_string(k) + " " + args);
      ASSERT_EQ(spec.exit_code, 0) << spec.output;
      EXPECT_EQ(spec.output, plain.output) << "k " << k << ", prompt " << prompt;
    }
  }
}

// A prompt longer than one Model call (256 tokens): start() feeds it in chunks, the MTP block too.
TEST(SpeculativeRun, LongPromptGreedyAsPlain) {
  const fs::path file = fs::temp_directory_path() / ("dsv4_spec_long_" + std::to_string(getpid()) + ".txt");
  {
    std::ofstream out(file);
    for (int i = 0; i < 12; ++i) out << "ROMEO:\nBut soft, what light through yonder window breaks?\n";
  }
  const std::string args = "--temp 0 -n 30 --json -f " + file.string();
  const auto plain = run_stdout(args), spec = run_stdout("--speculative 2 " + args);
  fs::remove(file);
  ASSERT_EQ(plain.exit_code, 0) << plain.output;
  ASSERT_EQ(spec.exit_code, 0) << spec.output;
  const auto p = nlohmann::json::parse(plain.output), s = nlohmann::json::parse(spec.output);
  EXPECT_GT(p["stats"]["prompt_tokens"].get<int>(), 256);
  EXPECT_EQ(s["text"], p["text"]);
  EXPECT_EQ(s["stats"]["generated_tokens"], 30);
}

TEST(SpeculativeRun, StopStringAndContextEndAsPlain) {
  for (const std::string extra : {"--stop peace -n 120", "-c 24 -n 200"}) {
    const auto plain = run_command(test::dsv4_binary() + " run --temp 0 " + extra + " ROMEO:");
    const auto spec = run_command(test::dsv4_binary() + " run --temp 0 --speculative 3 " + extra + " ROMEO:");
    ASSERT_EQ(plain.exit_code, 0) << plain.output;
    EXPECT_EQ(spec.output, plain.output) << extra;  // stdout and the context notice on stderr
  }
}

TEST(SpeculativeRun, StatsPrintTheAcceptanceLine) {
  const auto r = run_stderr("--temp 0 -n 40 --speculative 2 --stats ROMEO:");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  std::smatch m;
  const std::regex line(R"(speculative k 2 \| (\d+) verify steps, (\d+) plain \| acceptance ([0-9.]+) \(([0-9.]+) / ([0-9.]+)\) \| ([0-9.]+) tokens per verify)");
  ASSERT_TRUE(std::regex_search(r.output, m, line)) << r.output;
  const int rounds = std::stoi(m[1]), plain = std::stoi(m[2]);
  const double acceptance = std::stod(m[3]), per_verify = std::stod(m[6]);
  // 40 tokens: the first from the prompt, the rest from rounds (and plain steps where no draft fits).
  EXPECT_GT(rounds, 0);
  EXPECT_GE(per_verify, 1.0);
  EXPECT_LE(per_verify, 3.0);
  EXPECT_NEAR(per_verify * rounds + plain, 39, 0.01 * rounds + 0.5) << r.output;
  EXPECT_GE(acceptance, 0.0);
  EXPECT_LE(acceptance, 1.0);
  EXPECT_NE(r.output.find("generated 40 tok"), std::string::npos) << r.output;  // the usual stats line too
}

TEST(SpeculativeRun, JsonCarriesTheCounters) {
  const auto plain = run_stdout("--temp 0 -n 30 --json ROMEO:");
  const auto spec = run_stdout("--temp 0 -n 30 --json --speculative 1 ROMEO:");
  ASSERT_EQ(spec.exit_code, 0) << spec.output;
  const auto p = nlohmann::json::parse(plain.output), s = nlohmann::json::parse(spec.output);
  EXPECT_EQ(s["text"], p["text"]);
  EXPECT_FALSE(p["stats"].contains("speculative"));
  const auto& v = s["stats"]["speculative"];
  EXPECT_EQ(v["drafts"], 1);
  EXPECT_EQ(v["proposed"].get<int>(), v["verify_steps"].get<int>());  // one draft per verify
  EXPECT_LE(v["accepted"].get<int>(), v["proposed"].get<int>());
  // 29 tokens after the first: a + 1 per round, 1 per plain step.
  EXPECT_EQ(v["verify_steps"].get<int>() + v["accepted"].get<int>() + v["plain_steps"].get<int>(), 29) << spec.output;
}

TEST(SpeculativeRun, SeededSamplingIsReproducible) {
  const std::string args = "--temp 0.8 --top-p 0.95 -n 50 --speculative 2 ROMEO:";
  const auto a = run_stdout("--seed 11 " + args), b = run_stdout("--seed 11 " + args), c = run_stdout("--seed 12 " + args);
  ASSERT_EQ(a.exit_code, 0) << a.output;
  ASSERT_GT(a.output.size(), 50u) << a.output;
  EXPECT_EQ(a.output, b.output);
  EXPECT_NE(a.output, c.output);
}

TEST(SpeculativeRun, RefusalsAreOneLine) {
  for (const std::string flags : {"--speculative 2 --repeat-penalty 1.1", "--speculative 1 --presence-penalty 0.5",
                                  "--speculative 2 --json-object", "--speculative 4", "--speculative=-1"}) {
    const auto r = run_stderr("-n 4 " + flags + " ROMEO:");
    EXPECT_NE(r.exit_code, 0) << flags;
    EXPECT_TRUE(one_line(r.output)) << flags << ": " << r.output;
    EXPECT_NE(r.output.find("--speculative"), std::string::npos) << flags << ": " << r.output;
  }
}

// The bundled model without its mtp.* tensors: refused after loading, in one line naming the model.
TEST(SpeculativeRun, AModelWithoutAnMtpBlockIsRefused) {
  const fs::path dir = fs::temp_directory_path() / ("dsv4_spec_nomtp_" + std::to_string(getpid()));
  fs::create_directories(dir);
  const std::string src = test::bundled_model_dir();
  for (const char* f : {"config.json", "tokenizer.json", "tokenizer_config.json"})
    fs::copy_file(src + "/" + f, dir / f, fs::copy_options::overwrite_existing);
  {
    auto f = SafetensorsFile::open(src + "/model.safetensors");
    std::vector<std::pair<std::string, TensorView>> ts;
    for (const auto& e : f->tensors())
      if (e.name.rfind("mtp.", 0) != 0) ts.emplace_back(e.name, e.view);
    write_safetensors((dir / "model.safetensors").string(), ts);
  }
  const auto plain = run_command(test::dsv4_binary() + " run --raw -n 4 -m " + dir.string() + " ROMEO: 2>/dev/null");
  EXPECT_EQ(plain.exit_code, 0) << plain.output;  // the model itself runs
  const auto r = run_stderr("--raw -n 4 --speculative 1 -m " + dir.string() + " ROMEO:");
  fs::remove_all(dir);
  EXPECT_NE(r.exit_code, 0);
  EXPECT_TRUE(one_line(r.output)) << r.output;
  EXPECT_NE(r.output.find("needs an MTP block"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace dsv4
