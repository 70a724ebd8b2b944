// dsv4 perplexity: mean negative log-likelihood and perplexity of a text file, over windows of
// --window tokens taken every --stride tokens (each window scores the tokens no earlier window scored).
#include <CLI/CLI.hpp>
#include <unistd.h>

#include <cmath>
#include <cstdio>

#include "cli/cli_io.h"
#include "cli/commands.h"
#include "cli/device.h"
#include "cli/flags.h"
#include "cli/gen_options.h"
#include "core/error.h"
#include "io/config.h"

namespace dsv4::cli {
namespace {

struct PplArgs {
  ModelOptions gen;
  std::string file;
  int64_t window = 1024, stride = 0, limit = 0;
  bool json = false;
};

void perplexity(const PplArgs& a) {
  const std::string text = read_input_file(a.file);
  const int64_t W = std::min<int64_t>(a.window, load_config(a.gen.model).max_position_embeddings);
  const int64_t S = a.stride > 0 ? a.stride : W;
  if (S > W) fail("--stride (", S, ") must not exceed --window (", W, ")");
  // One slot of W positions; the CPU runs a window in one Model call, the GPU in calls of
  // default_call_tokens (2,048; 512 in the exact tier, which is bit-identical to the CPU up to 512 per call).
  const bool cuda = use_cuda(a.gen.device, "perplexity");
  Loaded l = load_model_and_tokenizer(a.gen, "perplexity", W, cuda ? 0 : W);
  if (!l.runner) return;  // a rank other than 0 of a TCP group: it made rank 0's calls
  if (a.gen.verbose)
    std::fprintf(stderr, "model %s: %lld layers | %s numerics | window %lld, stride %lld\n", a.gen.model.c_str(),
                 (long long)l.runner->config().num_layers, a.gen.numerics.c_str(), (long long)W, (long long)S);
  std::vector<int32_t> ids = l.tok.encode(text);
  if (a.limit > 0 && int64_t(ids.size()) > a.limit) ids.resize(size_t(a.limit));
  if (ids.size() < 2) fail(a.file, ": needs at least 2 tokens, has ", ids.size());
  const int64_t n = int64_t(ids.size()), V = l.runner->config().vocab_size;
  const bool tty = isatty(STDERR_FILENO) != 0 && !a.gen.quiet;

  double nll = 0;
  int64_t scored = 0, next_target = 1;  // first position whose token has not been scored yet
  for (int64_t start = 0; next_target < n; start += S) {
    const int64_t end = std::min(start + W, n);
    RunnerSequence seq(*l.runner);
    Tensor logits = seq.feed(std::vector<int32_t>(ids.begin() + start, ids.begin() + end), true);
    for (int64_t t = std::max(next_target, start + 1); t < end; ++t) {
      const float* row = logits.row(t - 1 - start);
      const float mx = *std::max_element(row, row + V);
      double sum = 0;
      for (int64_t v = 0; v < V; ++v) sum += std::exp(double(row[v]) - mx);
      nll += (double(mx) + std::log(sum)) - row[ids[size_t(t)]];
      ++scored;
    }
    next_target = end;
    if (tty) {
      const int width = 30, done = int(width * next_target / n);
      std::fprintf(stderr, "\r[%s%s] %lld/%lld tokens  ppl %.3f", std::string(size_t(done), '#').c_str(),
                   std::string(size_t(width - done), '.').c_str(), (long long)next_target, (long long)n,
                   std::exp(nll / double(scored)));
    }
    if (end == n) break;
  }
  if (tty) std::fputs("\n", stderr);
  const double mean = nll / double(scored);
  if (a.json)
    std::printf("{\"tokens\": %lld, \"scored\": %lld, \"mean_nll\": %.8f, \"perplexity\": %.8f}\n", (long long)n,
                (long long)scored, mean, std::exp(mean));
  else
    std::printf("%lld tokens, %lld scored (window %lld, stride %lld): mean NLL %.6f, perplexity %.4f\n", (long long)n,
                (long long)scored, (long long)W, (long long)S, mean, std::exp(mean));
}

}  // namespace

void register_perplexity(CLI::App& app) {
  auto a = std::make_shared<PplArgs>();
  CLI::App* c = app.add_subcommand("perplexity", "Mean NLL and perplexity of a text file");
  a->gen.add_to(*c);
  c->add_option("-f,--file", a->file, "Text file ('-': stdin)")->required();
  c->add_option("--window", a->window, "Tokens per forward window")->capture_default_str()->check(int_in(2, 1 << 30));
  c->add_option("--stride", a->stride, "Tokens between window starts (default: the window, no overlap)")
      ->check(int_in(1, 1 << 30));
  c->add_option("--limit", a->limit, "Score only the first N tokens of the file")->check(int_in(2));
  c->add_flag("--json", a->json, "Print the result as JSON");
  c->callback([a] { perplexity(*a); });
}

}  // namespace dsv4::cli
