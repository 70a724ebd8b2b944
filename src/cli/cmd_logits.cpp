// dsv4 logits: run a token sequence through the model with a given feeding schedule and write the
// logits of every position (and optionally the MTP block's) to a safetensors file.
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <cstdio>
#include <fstream>
#include <sstream>

#include "cli/commands.h"
#include "core/error.h"
#include "io/safetensors.h"
#include "model/model.h"
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
  std::ifstream in(path);
  if (!in) fail(path, ": cannot open token file");
  std::stringstream ss;
  ss << in.rdbuf();
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(ss.str());
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
  std::string model, tokens, schedule = "full", numerics = "reference", out;
};

void run_logits(const LogitsArgs& a) {
  std::vector<int32_t> ids = read_tokens(a.tokens);
  auto model = Model::load(a.model, parse_numerics(a.numerics));
  const int64_t n = int64_t(ids.size()), V = model->config().vocab_size;
  std::vector<int64_t> chunks = parse_schedule(a.schedule, n);
  SequenceState st = model->new_state();
  Tensor logits({n, V});
  int64_t done = 0;
  for (int64_t c : chunks) {
    std::vector<int32_t> part(ids.begin() + done, ids.begin() + done + c);
    Tensor l = model->forward(st, part);
    std::copy(l.data.begin(), l.data.end(), logits.row(done));
    done += c;
  }
  std::vector<std::pair<std::string, TensorView>> out = {
      {"logits", TensorView{DType::F32, logits.shape, reinterpret_cast<const uint8_t*>(logits.ptr()),
                            logits.data.size() * sizeof(float)}}};
  write_safetensors(a.out, out, {{"schedule", a.schedule}, {"numerics", a.numerics}});
  std::fprintf(stderr, "wrote logits [%lld, %lld] to %s\n", (long long)n, (long long)V, a.out.c_str());
}

}  // namespace

void register_logits(CLI::App& app) {
  auto a = std::make_shared<LogitsArgs>();
  a->model = default_model_dir();
  CLI::App* c = app.add_subcommand("logits", "Write the logits of every input position to a safetensors file");
  c->add_option("-m,--model", a->model, "Model directory (config.json + *.safetensors)")->capture_default_str();
  c->add_option("--tokens", a->tokens, "JSON array of token ids, or a safetensors file with tensor input_ids")
      ->required();
  c->add_option("--schedule", a->schedule, "full | decode:P (prefill P, then one per step) | chunks:A,B,...")
      ->capture_default_str();
  c->add_option("--numerics", a->numerics, "reference (float32) | official")->capture_default_str();
  c->add_option("--out", a->out, "Output safetensors file (tensor 'logits' float32 [n_tokens, vocab])")->required();
  c->callback([a] { run_logits(*a); });
}

}  // namespace dsv4::cli
