// The command line's contract (issue 20): every parse error is one line "dsv4: error: <what>" naming
// the flag and what it expects, exit code 1; `dsv4` alone prints the help; flags that do not apply to a
// command are refused; bench's no-GPU error is the one the other commands give; the context-limit
// notice, the model-directory check, the newline on a terminal, prefill progress, inspect -m.
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

using test::run_command;

std::string bin() { return test::dsv4_binary(); }

// stderr's first line and the exit code of `dsv4 ARGS` (stdout discarded, stdin empty).
struct ErrorLine {
  int exit_code;
  std::string first_line;
};
ErrorLine error_of(const std::string& args) {
  std::string cmd = bin();  // a subshell: run_command's own 2>&1 applies to it, not to dsv4
  cmd += " " + args + " 2>&1 >/dev/null </dev/null";
  auto r = run_command("(" + cmd + ")");
  return {r.exit_code, r.output.substr(0, r.output.find('\n'))};
}

struct Case {
  std::string args, line;
};

void expect_errors(const std::vector<Case>& cases) {
  for (const auto& c : cases) {
    const ErrorLine e = error_of(c.args);
    EXPECT_EQ(e.exit_code, 1) << "dsv4 " << c.args;
    EXPECT_EQ(e.first_line, c.line) << "dsv4 " << c.args;
  }
}

// Item 1: CLI11's own texts and exit codes 104-114 are gone.
TEST(CommandLine, ParseErrorsAreOneLineAndExitOne) {
  expect_errors({
      {"--bogus", "dsv4: error: unknown option '--bogus' (commands: run, chat, perplexity, serve, bench, inspect, "
                  "logits, tokenize, template)"},
      {"frobnicate", "dsv4: error: unknown command 'frobnicate' (commands: run, chat, perplexity, serve, bench, "
                     "inspect, logits, tokenize, template)"},
      {"run --bogus", "dsv4: error: dsv4 run: unknown option '--bogus' (dsv4 run --help lists the options)"},
      {"run --temp abc", "dsv4: error: --temp: expected a number from 0 to 100, got 'abc'"},
      {"run -n abc", "dsv4: error: --max-tokens: expected an integer from 1 to 1073741824, got 'abc'"},
      {"run -n 0", "dsv4: error: --max-tokens: expected an integer from 1 to 1073741824, got '0'"},
      {"run --stop", "dsv4: error: --stop: expects a value (TEXT)"},
      {"run --top-p 1.5", "dsv4: error: --top-p: expected a number from 0 to 1, got '1.5'"},
      {"run --device gpu", "dsv4: error: --device: expected auto | cpu | cuda, got 'gpu'"},
      {"run --numerics fast", "dsv4: error: --numerics: expected official | reference, got 'fast'"},
      {"chat --threads 0", "dsv4: error: --threads: expected an integer from 1 to 4096, got '0'"},
      {"serve --port 70000", "dsv4: error: --port: Value 70000 not in range 0 to 65535"},
      {"perplexity", "dsv4: error: dsv4 perplexity: --file is required"},
  });
}

TEST(CommandLine, BareDsv4PrintsTheHelp) {
  auto r = run_command(bin() + " </dev/null");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(r.output.substr(0, r.output.find('\n')), "dsv4 - a DeepSeek-V4 inference engine") << r.output;
  for (const char* cmd : {"run", "chat", "perplexity", "serve", "bench", "inspect", "logits", "tokenize", "template"})
    EXPECT_NE(r.output.find(std::string("\n  ") + cmd + " "), std::string::npos) << cmd << "\n" << r.output;
}

TEST(CommandLine, VersionNamesCommitAndCuda) {
  auto r = run_command(bin() + " --version");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  // "dsv4 0.1.0 (git <describe>, CUDA on|off)"
  EXPECT_TRUE(r.output.rfind("dsv4 ", 0) == 0) << r.output;
  EXPECT_NE(r.output.find(" (git "), std::string::npos) << r.output;
  EXPECT_TRUE(r.output.find(", CUDA on)\n") != std::string::npos || r.output.find(", CUDA off)\n") != std::string::npos)
      << r.output;
  EXPECT_EQ(r.output.find("git unknown"), std::string::npos) << "built from a git checkout: " << r.output;
}

// Item 3: bench without a usable GPU says what the other commands say, not a CUDA call site.
TEST(CommandLine, BenchWithoutGpuGivesTheCommonError) {
  const bool cuda_build = run_command(bin() + " --version").output.find("CUDA on") != std::string::npos;
  const ErrorLine run = error_of("run --device cuda -n 1");
  if (cuda_build && run.exit_code == 0) GTEST_SKIP() << "a Hopper GPU is present: bench runs";
  const std::string reason = cuda_build ? "no Hopper (sm_90) GPU found" : "this dsv4 was built without CUDA";
  EXPECT_EQ(run.first_line, "dsv4: error: dsv4 run: " + reason);
  const ErrorLine bench = error_of("bench --preset flash --dummy-weights --layers 1");
  EXPECT_EQ(bench.exit_code, 1);
  EXPECT_EQ(bench.first_line, "dsv4: error: dsv4 bench: " + reason);
}

// bench --prefix-reuse on the CPU (the bundled model): a repeated prompt of 300 tokens restores the
// snapshot at its last 128-token boundary (256) and prefills the 44 after it; a prompt of at most 128
// tokens has nothing to cache and is refused by the flag.
// `dsv4 bench ARGS --json FILE` (stdout and stderr in output) and the JSON it wrote (discarded: null).
struct BenchRun {
  test::CommandResult r;
  nlohmann::json j;
};
BenchRun bench_json(const std::string& args) {
  const std::string out = (std::filesystem::temp_directory_path() /
                           ("dsv4-bench-" + std::to_string(std::random_device{}()) + ".json")).string();
  BenchRun b{run_command(bin() + " bench " + args + " --json " + out + " 2>&1"), {}};
  std::ifstream f(out);
  b.j = nlohmann::json::parse(f, nullptr, false);
  std::filesystem::remove(out);
  return b;
}

TEST(CommandLine, BenchPrefixReuseRestoresTheLastBlockBoundary) {
  const auto [r, j] = bench_json("--device cpu --batch 1 --prefill '' --iters 1 --warmup 0 --prefix-reuse 300");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  ASSERT_TRUE(j.contains("prefix_reuse")) << r.output;
  ASSERT_EQ(j["prefix_reuse"].size(), 1u);
  const auto& row = j["prefix_reuse"][0];
  EXPECT_EQ(row["tokens"], 300);
  EXPECT_EQ(row["cached"], 256);
  EXPECT_GT(row["cold_ms"].get<double>(), 0);
  EXPECT_GT(row["warm_ms"].get<double>(), 0);
  const ErrorLine small = error_of("bench --device cpu --prefix-reuse 128");
  EXPECT_EQ(small.exit_code, 1);
  EXPECT_NE(small.first_line.find("--prefix-reuse"), std::string::npos) << small.first_line;
}

// bench over expert-parallel ranks on the CPU (the bundled model): rank 0's calls timed while the other
// rank serves its experts; the JSON says how many ranks; a split the experts cannot take, and --gpus on
// the CPU, are one line each.
TEST(CommandLine, BenchOverRanksTimesTheExpertParallelGroup) {
  const auto [r, j] = bench_json("--device cpu --ranks 2 --batch 1,2 --prefill 16 --iters 1 --warmup 0");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("2 expert-parallel ranks"), std::string::npos) << r.output;
  ASSERT_TRUE(j.is_object()) << r.output;
  EXPECT_EQ(j["ranks"], 2);
  ASSERT_EQ(j["decode"].size(), 2u);
  EXPECT_EQ(j["decode"][1]["batch"], 2);
  EXPECT_GT(j["decode"][1]["step_ms"].get<double>(), 0);
  ASSERT_EQ(j["prefill"].size(), 1u);
  EXPECT_EQ(j["prefill"][0]["tokens"], 16);
  const auto three = run_command(bin() + " bench --device cpu --ranks 3 --batch 1 --prefill '' 2>&1");
  EXPECT_EQ(three.exit_code, 1);
  EXPECT_NE(three.output.find("dsv4: error: expert parallelism: 8 routed experts do not split evenly over 3 ranks"),
            std::string::npos)
      << three.output;
  const ErrorLine gpus = error_of("bench --device cpu --gpus 2 --batch 1");
  EXPECT_EQ(gpus.first_line, "dsv4: error: --gpus 2: needs --device cuda (on the CPU, --ranks N runs the same split)");
}

// bench --peer (cli/bench_peer.h) on the CPU (the bundled model, 6 layers) against a stand-in peer that
// records its arguments and answers in tools/hf-eager-bench's format: it is asked for the bench's batches
// and prefill lengths at min(6, --peer-layers) layers; dsv4's side is its own step (or, at fewer layers,
// embedding + head + Lp per-layer times, prefill scaled by Lp / 6) and the speedups are the ratios; a peer
// row with an error is carried, not compared; a failing peer, a peer at the wrong layer count and JSON of
// another format are one line each.
class BenchPeer : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() / ("dsv4-peer-test-" + std::to_string(std::random_device{}()));
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  // A peer script that writes `json` (with LAYERS replaced by the --layers it got) and exits with `status`.
  std::string peer(const std::string& name, const std::string& json, int status = 0) {
    const std::string path = (dir_ / name).string();
    std::ofstream f(path);
    f << "#!/bin/sh\necho \"$@\" > '" << (dir_ / (name + ".args")).string() << "'\nout=\"\"; layers=\"\"\n"
      << "while [ $# -gt 0 ]; do case \"$1\" in --json) out=\"$2\";; --layers) layers=\"$2\";; esac; shift; done\n"
      << "cat > \"$out\" <<JSON\n" << json << "\nJSON\nsed -i \"s/LAYERS/$layers/\" \"$out\"\necho noise\nexit " << status
      << "\n";
    f.close();
    std::filesystem::permissions(path, std::filesystem::perms::owner_all);
    return path;
  }
  std::string args_of(const std::string& name) {
    std::ifstream f(dir_ / (name + ".args"));
    std::string line;
    std::getline(f, line);
    return line;
  }
  // The run's error line (after the load's progress lines) and its exit code.
  static ErrorLine bench_error(const std::string& args) {
    std::string cmd = "(";  // a subshell: stderr only
    cmd += bin();
    cmd += args;
    cmd += " 2>&1 >/dev/null </dev/null)";
    const auto r = run_command(cmd);
    const size_t at = r.output.find("dsv4: error: ");
    return {r.exit_code, at == std::string::npos ? r.output : r.output.substr(at, r.output.find('\n', at) - at)};
  }
  std::filesystem::path dir_;
};

// The stand-in's answer, claiming `layers` layers (LAYERS: the ones it was asked for).
std::string peer_json(const std::string& layers = "LAYERS") {
  std::string j = R"J({"what": "stand-in", "layers": )J";
  j += layers;
  j += R"J(, "device": "cpu", "transformers": "0.0",
 "decode": [{"batch": 1, "context": 1, "step_ms": 500.0}, {"batch": 2, "error": "OutOfMemoryError()"}],
 "prefill": [{"tokens": 16, "ms": 2000.0, "tok_s": 8.0}]})J";
  return j;
}

TEST_F(BenchPeer, ComparesAtThePeersLayerCount) {
  const std::string p = peer("peer", peer_json());
  const auto [r, j] = bench_json("--device cpu --batch 1,2 --prefill 16 --iters 1 --warmup 0 --peer " + p);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(args_of("peer").rfind("--layers 4 --batch 1,2 --prefill 16 --context 1 --json ", 0), 0u) << args_of("peer");
  const std::string no_prefill = peer("no_prefill", peer_json());
  const auto [r2, j2] = bench_json("--device cpu --batch 1 --prefill '' --iters 1 --warmup 0 --peer " + no_prefill);
  ASSERT_EQ(r2.exit_code, 0) << r2.output;
  EXPECT_EQ(args_of("no_prefill").rfind("--layers 4 --batch 1 --prefill  --context 1 --json ", 0), 0u)
      << args_of("no_prefill");  // an empty word: no prefill asked of the peer
  EXPECT_EQ(j2["peer"]["decode"].size(), 1u);
  ASSERT_TRUE(j.is_object() && j.contains("peer")) << r.output;
  const auto& c = j["peer"];
  EXPECT_EQ(c["layers"], 4);
  EXPECT_EQ(c["scaled_from_layers"], 6);
  ASSERT_EQ(c["decode"].size(), 2u);
  const auto& d1 = j["decode"][0];
  const double dsv4_ms = (d1["embed_head_us"].get<double>() + 4 * d1["layer_us"].get<double>()) * 1e-3;
  EXPECT_NEAR(c["decode"][0]["dsv4_ms"].get<double>(), dsv4_ms, 1e-9);
  EXPECT_NEAR(c["decode"][0]["dsv4_speedup"].get<double>(), 500.0 / dsv4_ms, 1e-6 * 500.0 / dsv4_ms);
  EXPECT_EQ(c["decode"][1]["peer_error"], "OutOfMemoryError()");
  EXPECT_FALSE(c["decode"][1].contains("dsv4_speedup"));
  const double tok_s = 16 / (j["prefill"][0]["ms"].get<double>() * 4 / 6 * 1e-3);
  EXPECT_NEAR(c["prefill"][0]["dsv4_tok_s"].get<double>(), tok_s, 1e-6 * tok_s);
  EXPECT_NEAR(c["prefill"][0]["dsv4_speedup"].get<double>(), tok_s / 8.0, 1e-6 * tok_s);
  EXPECT_EQ(c["result"]["what"], "stand-in");
  EXPECT_NE(r.output.find("peer error: OutOfMemoryError()"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("noise"), std::string::npos) << "the peer's stdout is discarded";
}

TEST_F(BenchPeer, SameLayerCountComparesTheSteps) {
  const std::string p = peer("peer", peer_json());
  const auto [r, j] =
      bench_json("--device cpu --batch 1 --prefill 16 --iters 1 --warmup 0 --peer-layers 10 --peer " + p);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  ASSERT_TRUE(j.is_object() && j.contains("peer")) << r.output;
  EXPECT_EQ(j["peer"]["layers"], 6);
  const double step = j["decode"][0]["step_ms"].get<double>();
  EXPECT_NEAR(j["peer"]["decode"][0]["dsv4_speedup"].get<double>(), 500.0 / step, 1e-6 * 500.0 / step);
  EXPECT_EQ(r.output.find("dsv4 at the peer's"), std::string::npos) << r.output;
}

TEST_F(BenchPeer, BadPeersAreOneLine) {
  const std::string base = " bench --device cpu --batch 1 --prefill '' --iters 1 --warmup 0 --peer ";
  const ErrorLine failed = bench_error(base + peer("failing", peer_json(), 3));
  EXPECT_EQ(failed.exit_code, 1);
  EXPECT_EQ(failed.first_line.rfind("dsv4: error: dsv4 bench --peer: '", 0), 0u) << failed.first_line;
  EXPECT_NE(failed.first_line.find("failed (exit code 3)"), std::string::npos) << failed.first_line;
  const ErrorLine layers = bench_error(base + peer("layers", peer_json("3")));
  EXPECT_EQ(layers.exit_code, 1);
  EXPECT_EQ(layers.first_line, "dsv4: error: dsv4 bench --peer: the peer ran 3 layers, asked for 4");
  // Descriptions of other types are printed as JSON, not refused.
  const std::string odd = peer("odd", R"({"what": null, "transformers": 5, "device": [1], "decode": [], "prefill": []})");
  const auto [r, j] = bench_json("--device cpu --batch 1 --prefill '' --iters 1 --warmup 0 --peer " + odd);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("peer: null, transformers 5, 4 layers, [1]"), std::string::npos) << r.output;
  const ErrorLine format = bench_error(base + peer("format", R"({"decode": {}})"));
  EXPECT_EQ(format.first_line,
            "dsv4: error: dsv4 bench --peer: the peer's JSON needs \"decode\" and \"prefill\" arrays "
            "(tools/hf-eager-bench's format)");
}

// Item 4: nonsense is refused where it is parsed.
TEST(CommandLine, FlagsThatDoNotApplyAreRefused) {
  expect_errors({
      {"perplexity -f x --temp 1", "dsv4: error: dsv4 perplexity: unknown option '--temp' (dsv4 perplexity --help "
                                   "lists the options)"},
      {"perplexity -f x --max-tokens 5", "dsv4: error: dsv4 perplexity: unknown option '--max-tokens' (dsv4 "
                                         "perplexity --help lists the options)"},
      {"perplexity -f x --limit -5", "dsv4: error: --limit: expected an integer >= 2, got '-5'"},
      {"perplexity -f x --stride -1", "dsv4: error: --stride: expected an integer from 1 to 1073741824, got '-1'"},
      {"perplexity -f x --window 1", "dsv4: error: --window: expected an integer from 2 to 1073741824, got '1'"},
      {"run --effort high", "dsv4: error: dsv4 run: --effort requires --thinking"},
      {"run --thinking --raw", "dsv4: error: --thinking cannot be used with --raw"},
      {"run --system hi --raw", "dsv4: error: --system cannot be used with --raw"},
      {"chat --raw", "dsv4: error: dsv4 chat: unknown option '--raw' (dsv4 chat --help lists the options)"},
      {"tokenize --decode 1,2 --json", "dsv4: error: --decode cannot be used with --json"},
      {"template --messages x --json", "dsv4: error: dsv4 template: --json requires --ids"},
      {"run -f prompt.txt hello", "dsv4: error: prompt cannot be used with --file"},
  });
}

// Item 5: a missing -m directory is named as such (not as a missing tokenizer.json).
TEST(CommandLine, MissingModelDirectory) {
  expect_errors({
      {"run -m /nonexistent/model", "dsv4: error: --model: no such directory '/nonexistent/model'"},
      {"chat -m /nonexistent/model", "dsv4: error: --model: no such directory '/nonexistent/model'"},
      {"tokenize -m /nonexistent/model --text hi", "dsv4: error: --model: no such directory '/nonexistent/model'"},
      {"serve -m /nonexistent/model", "dsv4: error: --model: no such directory '/nonexistent/model'"},
      {"logits -m /nonexistent/model --tokens t.json --out o.safetensors",
       "dsv4: error: --model: no such directory '/nonexistent/model'"},
      {"inspect /nonexistent/model", "dsv4: error: dir: no such directory '/nonexistent/model'"},
      {"run -m /etc/hostname", "dsv4: error: --model: expected a model directory, '/etc/hostname' is a file"},
  });
}

TEST(CommandLine, InspectTakesDashM) {
  auto r = run_command(bin() + " inspect -m " + test::source_dir() + "/models/tiny-shakespeare");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("checks      all passed"), std::string::npos) << r.output;
}

TEST(CommandLine, ContextLimitNotice) {
  // An 8-token context: the prompt plus 6 tokens fill it long before -n 50.
  auto r = run_command("printf 'ROMEO:' | " + bin() + " run --temp 0 -n 50 -c 8 --json 2>&1");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const size_t nl = r.output.find('\n');
  const auto j = nlohmann::json::parse(r.output.substr(0, nl));
  EXPECT_EQ(j["context_full"], true) << r.output;
  EXPECT_EQ(j["finish_reason"], "length") << r.output;
  EXPECT_EQ(j["stats"]["prompt_tokens"].get<int>() + j["stats"]["generated_tokens"].get<int>(), 8) << r.output;
  EXPECT_EQ(r.output.substr(nl + 1), "(stopped: the context of 8 tokens is full; -c/--ctx-size sets it)\n");
  // -q: no notice.
  auto q = run_command("(printf 'ROMEO:' | " + bin() + " run --temp 0 -n 50 -c 8 -q 2>&1 >/dev/null)");
  EXPECT_EQ(q.output, "");
  // A prompt that does not fit.
  const ErrorLine e = error_of("run -c 4 'ROMEO: the longer prompt'");
  EXPECT_EQ(e.exit_code, 1);
  EXPECT_EQ(e.first_line.rfind("dsv4: error: the prompt has ", 0), 0u) << e.first_line;
  EXPECT_NE(e.first_line.find("tokens; the context holds 4 (-c/--ctx-size"), std::string::npos) << e.first_line;
}

TEST(CommandLine, JsonIsOneObjectWithTextAndStats) {
  auto greedy = run_command("printf 'ROMEO:\\n' | " + bin() + " run --temp 0 -n 20 2>/dev/null");
  auto r = run_command("printf 'ROMEO:\\n' | " + bin() + " run --temp 0 -n 20 --json 2>/dev/null");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto j = nlohmann::json::parse(r.output);
  EXPECT_EQ(j["text"].get<std::string>() + "\n", greedy.output);
  EXPECT_EQ(j["stats"]["generated_tokens"], 20);
  EXPECT_GT(j["stats"]["decode_tok_s"].get<double>(), 0);
}

// On a terminal: template and tokenize --decode end with a newline (piped: the exact text only), and a
// long prompt shows prefill progress.
TEST(CommandLine, TerminalNewlineAndPrefillProgress) {
  auto piped = run_command(bin() + " tokenize --decode 40,41,42 2>/dev/null");
  ASSERT_EQ(piped.exit_code, 0);
  ASSERT_FALSE(piped.output.empty());
  ASSERT_NE(piped.output.back(), '\n');
  {
    test::PtySession s(bin() + " tokenize --decode 40,41,42");
    ASSERT_EQ(s.wait(), 0);
    EXPECT_EQ(s.output(), piped.output + "\r\n");  // the terminal shows "\n" as CR LF
  }
  const std::string msgs = (std::filesystem::temp_directory_path() / ("dsv4-msgs-" + std::to_string(std::random_device{}()) + ".json")).string();
  std::ofstream(msgs) << R"([{"role": "user", "content": "hi"}])";
  {
    test::PtySession s(bin() + " template --messages " + msgs);
    ASSERT_EQ(s.wait(), 0);
    auto p = run_command(bin() + " template --messages " + msgs);
    EXPECT_EQ(s.output(), p.output + "\r\n");
  }
  std::filesystem::remove(msgs);
  std::string prompt;
  for (int i = 0; i < 700; ++i) prompt += "ROMEO: ";  // ~2,800 tokens: two Model calls (cli/device.h)
  test::PtySession s(bin() + " run --temp 0 -n 2 '" + prompt + "'");
  // Generous limits: the run is CPU prefill of ~2,800 tokens, slow under ASan on a loaded machine (this test
  // checks the progress line, not speed; a 60 s wait timed out there once).
  EXPECT_TRUE(s.expect("prefill 2048 / ", 300)) << s.output();
  EXPECT_EQ(s.wait(300), 0);
}

}  // namespace
}  // namespace dsv4
