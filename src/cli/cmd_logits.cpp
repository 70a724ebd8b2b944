// dsv4 logits: run a token sequence through the model with a given feeding schedule and write the
// logits of every position (and optionally the MTP block's) to a safetensors file.
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <sstream>

#include "cli/cli_io.h"
#include "cli/commands.h"
#include "cli/device.h"
#include "cli/flags.h"
#include "cli/gen_options.h"
#include "core/error.h"
#include "io/safetensors.h"
#include "model/schedule.h"

namespace dsv4::cli {
namespace {

// A JSON array of ids, or a safetensors file with an integer tensor `input_ids`.
std::vector<int32_t> read_tokens(const std::string& path) {
  if (path.size() > 12 && path.substr(path.size() - 12) == ".safetensors") {
    auto f = SafetensorsFile::open(path);
    for (const auto& e : f->tensors())
      if (e.name == "input_ids") {
        if (e.view.dtype != DType::I32 && e.view.dtype != DType::I64)
          fail(path, ": tensor 'input_ids' is ", dtype_name(e.view.dtype), ", expected I32 or I64");
        Tensor t = to_tensor(e.view);
        return std::vector<int32_t>(t.data.begin(), t.data.end());
      }
    fail(path, ": no tensor 'input_ids'");
  }
  const std::string text = read_input_file(path);
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    fail(path, ": malformed JSON: ", e.what());
  }
  if (!j.is_array()) fail(path, ": expected a JSON array of token ids");
  std::vector<int32_t> ids;
  for (size_t i = 0; i < j.size(); ++i) {
    if (!j[i].is_number_integer()) fail(path, ": element ", i, " is not an integer token id");
    ids.push_back(j[i].get<int32_t>());
  }
  if (ids.empty()) fail(path, ": no tokens");
  return ids;
}

struct LogitsArgs {
  std::string model, tokens, schedule = "full", numerics = "official", out, device = "auto", kernels;
  bool mtp = false;
  RankFlags ranks;
};

void run_logits(const LogitsArgs& a) {
  std::vector<int32_t> ids = read_tokens(a.tokens);
  const int64_t n = int64_t(ids.size());
  const bool cuda = use_cuda(a.device, "logits");
  // One slot of n positions; the CPU runs a schedule's chunk in one Model call, the GPU in calls of
  // 256 tokens (its exact tier is bit-identical to the CPU up to 512 tokens per call).
  const RunnerRequest r{.cuda = cuda, .numerics = a.numerics, .kernels = a.kernels, .max_ctx = n,
                        .chunk = cuda ? 256 : n, .ranks = a.ranks};
  const std::unique_ptr<Runner> runner = load_runner(a.model, r, terminal_load_progress(a.model));
  if (!runner) return;  // a rank other than 0 of a TCP group: it made rank 0's calls
  const int64_t V = runner->config().vocab_size;
  const std::vector<int64_t> chunks = parse_schedule(a.schedule, n);
  if (a.mtp && runner->model().num_mtp() == 0) fail(a.model, ": --mtp: the checkpoint has no mtp.0 block");
  Tensor logits({n, V}), mtp_logits({std::max<int64_t>(n - 1, 0), V});
  int64_t done = 0;
  if (!a.mtp) {
    RunnerSequence seq(*runner);
    for (int64_t c : chunks) {
      const Tensor l = seq.feed(std::vector<int32_t>(ids.begin() + done, ids.begin() + done + c), true);
      std::copy(l.data.begin(), l.data.end(), logits.row(done));
      done += c;
    }
  } else {
    // The MTP block reads the main model's last-layer streams: the Model's one-sequence forward, in
    // pieces of the schedule's chunks that one call of the backend holds (the streams of a call).
    Sequence seq(runner->model());
    const int64_t most = runner->model().backend().capacity().max_tokens;
    std::vector<int64_t> pieces;
    for (int64_t c : chunks)
      for (int64_t o = 0; o < c; o += most) pieces.push_back(std::min(most, c - o));
    for (int64_t c : pieces) {
      std::vector<int32_t> part(ids.begin() + done, ids.begin() + done + c);
      Tensor streams;
      const Tensor l = seq.forward(part, ForwardOptions{.streams = &streams});
      std::copy(l.data.begin(), l.data.end(), logits.row(done));
      // MTP at position t: the main streams at t and the id of token t+1 (known for t < n-1).
      const int64_t m = std::min(c, n - 1 - done);
      if (m > 0) {
        const int64_t width = streams.numel() / c;
        Tensor x({m, streams.dim(1), streams.dim(2)});
        std::copy(streams.ptr(), streams.ptr() + m * width, x.ptr());
        const Tensor ml = seq.forward_mtp(x, std::vector<int32_t>(ids.begin() + done + 1, ids.begin() + done + 1 + m));
        std::copy(ml.data.begin(), ml.data.end(), mtp_logits.row(done));
      }
      done += c;
    }
  }
  auto view = [](const Tensor& t) {
    return TensorView{DType::F32, t.shape, reinterpret_cast<const uint8_t*>(t.ptr()), t.data.size() * sizeof(float)};
  };
  std::vector<std::pair<std::string, TensorView>> out = {{"logits", view(logits)}};
  if (a.mtp) out.emplace_back("mtp_logits", view(mtp_logits));
  std::map<std::string, std::string> meta = {{"schedule", a.schedule}, {"numerics", a.numerics}};
  if (cuda) meta["device"] = "cuda";
  write_safetensors(a.out, out, meta);
  std::fprintf(stderr, "wrote logits [%lld, %lld] to %s%s\n", (long long)n, (long long)V, a.out.c_str(),
               cuda ? " (cuda)" : "");
}

}  // namespace

void register_logits(CLI::App& app) {
  auto a = std::make_shared<LogitsArgs>();
  a->model = default_model_dir();
  CLI::App* c = app.add_subcommand("logits", "Write the logits of every input position to a safetensors file");
  c->add_option("-m,--model", a->model, "Model directory (config.json + *.safetensors)")
      ->capture_default_str()
      ->check(existing_dir());
  c->add_option("--tokens", a->tokens, "File of the input: a JSON array of token ids, or a safetensors file with tensor input_ids")
      ->required();
  c->add_option("--schedule", a->schedule, "full | decode:P (prefill P, then one per step) | chunks:A,B,...")
      ->capture_default_str();
  c->add_option("--numerics", a->numerics,
                "official (DeepSeek's quantization-aware numerics) | reference (float32, matches transformers)")
      ->capture_default_str()
      ->check(one_of({"official", "reference"}));
  c->add_flag("--mtp", a->mtp,
              "Also run the MTP block (mtp.0) and write 'mtp_logits' [n_tokens-1, vocab]: row t predicts token t+2");
  add_device_option(*c, a->device, a->kernels);
  add_ranks_option(*c, a->ranks);
  c->add_option("--out", a->out, "Output safetensors file (tensor 'logits' float32 [n_tokens, vocab])")->required();
  c->callback([a] { run_logits(*a); });
}

}  // namespace dsv4::cli
