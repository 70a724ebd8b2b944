// dsv4 inspect and dsv4 logits, run as a user would: the real binary, real files, exit codes and
// one-line errors.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <random>

#include "io/safetensors.h"
#include "model/golden.h"
#include "support/run_command.h"
#include "support/test_paths.h"

namespace dsv4 {
namespace {

namespace fs = std::filesystem;
using test::run_command;

std::string bin() { return test::dsv4_binary(); }

class TempDir {
 public:
  TempDir() : path_(fs::temp_directory_path() / ("dsv4-cli-" + std::to_string(std::random_device{}()))) {
    fs::create_directories(path_);
  }
  ~TempDir() { fs::remove_all(path_); }
  std::string operator/(const std::string& name) const { return (path_ / name).string(); }
  std::string str() const { return path_.string(); }

 private:
  fs::path path_;
};

void write_file(const std::string& path, const std::string& text) { std::ofstream(path) << text; }

int count_lines(const std::string& s) { return int(std::count(s.begin(), s.end(), '\n')); }

TEST(Inspect, BundledModelPassesEveryCheck) {
  auto r = run_command(bin() + " inspect");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("SSCHCH"), std::string::npos) << r.output;  // layers 0-5: sliding x2, CSA, HCA, CSA, HCA
  EXPECT_NE(r.output.find("checks      all passed"), std::string::npos) << r.output;
}

TEST(Inspect, KvCacheBytes) {
  // io/kv_size.h on the bundled model: 2 CSA + 2 HCA layers of 200-byte entries, 68-byte indexer keys.
  auto r = run_command(bin() + " inspect");
  EXPECT_NE(r.output.find("kv cache    146.5 B per token of context in compact records (entry 200 B, indexer key "
                          "68 B; as bf16 rows 272 B)"),
            std::string::npos)
      << r.output;
  // 6 layers and the mtp.0 block, 32 rows of 200 B each.
  EXPECT_NE(r.output.find("window rings 43.75 KiB per sequence as records (cpu), 56.00 KiB as bf16 rows (cuda) "
                          "(7 layers x 32 rows)"),
            std::string::npos)
      << r.output;
}

TEST(Inspect, KvCacheWithoutCompactRecords) {
  if (!test::have_shared()) GTEST_SKIP();
  auto r = run_command(bin() + " inspect " + test::fixture_dir("tiny-a") + "/model");  // head 64, rope 8
  EXPECT_NE(r.output.find("kv cache    112 B per token of context as bf16 rows"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("= 56 must be a multiple of the FP8 block of 64"), std::string::npos) << r.output;
}

TEST(Inspect, MemoryPlanOfFlashOnOneAndTwoGpus) {
  // One H200 has ~139.7 GiB free: Flash needs two (io/memory_plan.h; numbers in tests/io/test_memory_plan.cpp,
  // calls of 256 tokens). The default is the commands' Model calls of 2048 tokens (cli/device.h).
  auto dflt = run_command(bin() + " inspect --preset flash --gpus 2 --gpu-memory 139.7");
  EXPECT_NE(dflt.output.find(" per GPU, calls of 2048 tokens\n"), std::string::npos) << dflt.output;
  auto one = run_command(bin() + " inspect --preset flash --gpus 1 --prefill-chunk 256 --gpu-memory 139.7");
  EXPECT_EQ(one.exit_code, 1) << one.output;
  // Workspace 0.44 GiB: 0.32 before the lanes' two 64 MiB cuBLASLt workspaces and the indexer compressor's
  // own scratch (~1 MiB at 256 tokens) were counted; 0.47 in the GPU's default (fast) tier, with wo_a's bf16
  // rows (32 MiB). Weights 148.64 GiB there: 150.02 with wo_a as bf16, its FP8 codes instead (44 blocks
  // x 32 MiB less).
  EXPECT_NE(one.output.find("  - needs 149.15 GiB per GPU on 1 GPU(s) (weights 148.64, KV 0.04, workspace 0.47), "
                            "the GPU has 139.70 GiB; use --gpus 2 (--gpu-memory)\n"),
            std::string::npos)
      << one.output;
  auto two = run_command(bin() + " inspect --preset flash --gpus 2 --prefill-chunk 256 --gpu-memory 139.7");
  EXPECT_EQ(two.exit_code, 0) << two.output;
  EXPECT_NE(two.output.find("128 of 256 routed experts per layer on each"), std::string::npos) << two.output;
  EXPECT_NE(two.output.find("  GPU 1     experts 128-255, "), std::string::npos) << two.output;
  // 80.32 GiB before the exchange's routed pass over arrived rows was counted (+0.08 GiB of workspace),
  // 80.40 before the lanes' workspaces (+0.125 GiB), 80.52 before the fast tier's wo_a codes (-1.38 GiB of
  // weights, +0.03 of workspace).
  EXPECT_NE(two.output.find("  fits      79.18 GiB of 139.70 GiB (--gpu-memory)"), std::string::npos) << two.output;
  // The memory left, 139.70 - 79.18 = 60.52 GiB, holds ~18.49M tokens of 3,514.25 B (io/kv_size.h).
  EXPECT_NE(two.output.find("  kv room   about 1849"), std::string::npos) << two.output;
  EXPECT_NE(two.output.find(" more tokens of context in the memory left (3514.25 B each, compact records)"),
            std::string::npos)
      << two.output;
}

TEST(Inspect, MemoryPlanErrors) {
  auto r = run_command(bin() + " inspect --gpus 9");  // the bundled model has 8 routed experts
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("  - --gpus 9: the model has 8 routed experts per layer; expert parallelism needs at most "
                          "one GPU per expert\n"),
            std::string::npos)
      << r.output;
  auto z = run_command(bin() + " inspect --gpus 0");
  EXPECT_EQ(z.exit_code, 1);
  EXPECT_EQ(z.output, "dsv4: error: --gpus: expected an integer from 1 to 4096, got '0'\n");
  auto p = run_command(bin() + " inspect --preset flash -m " + test::source_dir() + "/models/tiny-shakespeare");
  EXPECT_EQ(p.exit_code, 1);
  EXPECT_EQ(p.output, "dsv4: error: --model cannot be used with --preset\n");
}

TEST(Inspect, PublishedFormatShowsFormats) {
  if (!test::have_shared()) GTEST_SKIP();
  auto r = run_command(bin() + " inspect " + test::fixture_dir("tiny-q") + "/model --tensors");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("fp8-e4m3 128x128"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("fp4-e2m1 1x32"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("1 block(s) in checkpoint"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("layers.0.ffn.experts.0.w1.weight"), std::string::npos) << r.output;
}

TEST(Inspect, ReportsEveryProblem) {
  TempDir d;
  fs::copy_file(test::source_dir() + "/models/tiny-shakespeare/config.json", d / "config.json");
  // Keep only the first 20 tensors: everything else is missing.
  auto f = SafetensorsFile::open(test::source_dir() + "/models/tiny-shakespeare/model.safetensors");
  std::vector<std::pair<std::string, TensorView>> ts;
  for (size_t i = 0; i < 20; ++i) ts.emplace_back(f->tensors()[i].name, f->tensors()[i].view);
  write_safetensors(d / "model.safetensors", ts);
  auto r = run_command(bin() + " inspect " + d.str());
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("problem(s)"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("'layers.5.attn.wq_a.weight' is missing"), std::string::npos) << r.output;
}

TEST(Inspect, TruncatedCheckpointIsOneLineError) {
  TempDir d;
  fs::copy_file(test::source_dir() + "/models/tiny-shakespeare/config.json", d / "config.json");
  fs::copy_file(test::source_dir() + "/models/tiny-shakespeare/model.safetensors", d / "model.safetensors");
  fs::resize_file(d / "model.safetensors", 4096);
  auto r = run_command(bin() + " logits -m " + d.str() + " --tokens /dev/null --out " + (d / "o.safetensors"));
  EXPECT_EQ(r.exit_code, 1);
  auto r2 = run_command(bin() + " inspect " + d.str());
  EXPECT_EQ(r2.exit_code, 1) << r2.output;
  EXPECT_NE(r2.output.find("model.safetensors"), std::string::npos) << r2.output;
}

TEST(Logits, ReferenceDecodeScheduleMatchesTransformers) {
  if (!test::have_shared()) GTEST_SKIP();
  TempDir d;
  test::Golden g("tiny-a");
  std::string ids = "[";
  for (int32_t id : g.ids("input_ids")) ids += std::to_string(id) + ",";
  ids.back() = ']';
  write_file(d / "ids.json", ids);
  auto r = run_command(bin() + " logits -m " + test::fixture_dir("tiny-a") + "/model --tokens " + (d / "ids.json") +
                       " --schedule decode:37 --numerics reference --out " + (d / "out.safetensors"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  auto out = SafetensorsFile::open(d / "out.safetensors");
  ASSERT_EQ(out->tensors().size(), 1u);
  EXPECT_EQ(out->tensors()[0].name, "logits");
  test::expect_rel_l2(to_tensor(out->tensors()[0].view), g["logits_decode"], 1e-4, "cli tiny-a logits decode:37");
}

TEST(Logits, TokensFromSafetensorsAndMtp) {
  if (!test::have_shared()) GTEST_SKIP();
  TempDir d;
  const std::string golden = test::fixture_dir("tiny-q") + "/golden.safetensors";
  auto run = [&](const std::string& schedule, const std::string& out) {
    auto r = run_command(bin() + " logits -m " + test::fixture_dir("tiny-q") + "/model --tokens " + golden +
                         " --numerics reference --mtp --schedule " + schedule + " --out " + out);
    EXPECT_EQ(r.exit_code, 0) << r.output;
    auto f = SafetensorsFile::open(out);
    std::map<std::string, Tensor> m;
    for (const auto& e : f->tensors()) m[e.name] = to_tensor(e.view);
    return m;
  };
  auto full = run("full", d / "a.safetensors");
  auto chunks = run("chunks:50,1,7,30", d / "b.safetensors");
  ASSERT_TRUE(full.count("mtp_logits"));
  EXPECT_EQ(full["logits"].shape, (Shape{160, 512}));
  EXPECT_EQ(full["mtp_logits"].shape, (Shape{159, 512}));
  // The MTP block keeps its own cache: feeding it in chunks gives the same logits.
  test::expect_rel_l2(chunks["mtp_logits"], full["mtp_logits"], 1e-5, "mtp logits chunked vs full");
  test::expect_rel_l2(chunks["logits"], full["logits"], 1e-5, "logits chunked vs full");
}

TEST(Logits, BadInputIsOneLineError) {
  TempDir d;
  write_file(d / "bad.json", "[1, 2,");
  write_file(d / "ok.json", "[1, 2, 3]");
  write_file(d / "big.json", "[1, 2, 99999]");
  const std::string out = " --out " + (d / "o.safetensors");
  struct Case {
    std::string args, expect;
  } cases[] = {
      {"--tokens " + (d / "bad.json"), "bad.json: malformed JSON"},
      {"--tokens " + (d / "missing.json"), "missing.json: cannot open"},
      {"--tokens " + (d / "big.json"), "token id 99999 is outside the vocabulary"},
      {"--tokens " + (d / "ok.json") + " --schedule decode:x", "'x' is not a positive integer"},
      {"--tokens " + (d / "ok.json") + " --schedule sometimes", "expected 'full', 'decode:P' or 'chunks:A,B,...'"},
      {"--tokens " + (d / "ok.json") + " --numerics fast", "dsv4: error: --numerics: expected official | reference, got 'fast'"},
      {"--tokens " + (d / "ok.json") + " -m " + d.str(), "config.json"},
  };
  for (const auto& c : cases) {
    auto r = run_command(bin() + " logits " + c.args + out);
    EXPECT_EQ(r.exit_code, 1) << c.args << "\n" << r.output;
    EXPECT_NE(r.output.find(c.expect), std::string::npos) << c.args << "\n" << r.output;
    EXPECT_EQ(count_lines(r.output), 1) << c.args << "\n" << r.output;
  }
}

}  // namespace
}  // namespace dsv4
