// dsv4 serve: the OpenAI-compatible HTTP server (server/) over the continuous-batching engine
// (runtime/engine.h). Prints the URL once it accepts connections; SIGINT/SIGTERM stop it cleanly:
// idle connections close, new requests get 503, running ones may finish for --shutdown-timeout
// seconds, the rest are cancelled, then the process exits with status 0. A second signal ends the
// process at once (status 128 + the signal).
#include <CLI/CLI.hpp>
#include <pthread.h>
#include <sys/resource.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <thread>

#include "cli/commands.h"
#include "cli/device.h"
#include "cli/flags.h"
#include "cli/gen_options.h"
#include "runtime/engine.h"
#include "server/context.h"
#include "server/http_server.h"

namespace dsv4::cli {
namespace {

struct ServeArgs {
  std::string model, numerics = "official", served_name, device = "auto", kernels;
  server::HttpOptions http;
  EngineOptions engine{.max_tokens_limit = 8192};  // no request generates for hours unasked
  double shutdown_timeout = 10;
  bool no_webui = false;
  bool no_prefix_cache = false;
  bool stats = false;
  int64_t prefix_cache_mib = 0;  // 0: the device's default (prefix_cache_budget)
  RankFlags ranks;               // --ranks / --gpus: data-parallel sequences over expert-parallel ranks
  bool chunk_given = false, step_given = false;  // --prefill-chunk / --max-step-tokens on the command line
};

// The prefix cache's default budget, for each data-parallel rank: 1 GiB of host memory on the CPU (the
// bundled model's snapshots are ~0.2 MB + ~544 bytes a token); on the GPU, where snapshots are device
// memory, a quarter of what is free once the weights and the slots' state are allocated (1 GiB when the
// backend does not say), shared by the ranks that share the GPU (`--ranks N` on one GPU).
uint64_t prefix_cache_budget(const ServeArgs& a, Runner& runner) {
  constexpr uint64_t kMiB = uint64_t(1) << 20;
  if (a.no_prefix_cache) return 0;
  if (a.prefix_cache_mib > 0) return uint64_t(a.prefix_cache_mib) * kMiB;
  const uint64_t free = runner.model().backend().info().free_bytes;
  const uint64_t sharing = a.ranks.gpus > 1 ? 1 : uint64_t(runner.ranks());
  return free > 0 ? free / 4 / sharing : 1024 * kMiB;
}

// --stats: what the engine did, on stderr at shutdown (and the speculative counters with --speculative).
void print_engine_stats(const EngineStats& s) {
  std::fprintf(stderr, "dsv4 serve: %llu requests, %llu prompt tokens, %llu generated tokens, %llu steps\n",
               (unsigned long long)s.requests_submitted, (unsigned long long)s.prompt_tokens,
               (unsigned long long)s.generated_tokens, (unsigned long long)s.steps);
  if (s.speculative > 0)
    std::fprintf(stderr,
                 "speculative k %lld | %llu verify steps, %llu plain | acceptance %.3f (%llu / %llu drafts) | %.2f tokens "
                 "per verify\n",
                 (long long)s.speculative, (unsigned long long)s.spec_verify_steps, (unsigned long long)s.spec_plain_steps,
                 s.spec_acceptance(), (unsigned long long)s.spec_accepted_tokens, (unsigned long long)s.spec_draft_tokens,
                 s.spec_verify_steps ? double(s.spec_tokens) / double(s.spec_verify_steps) : 0.0);
}

std::string model_name_of(const std::string& dir) {
  std::filesystem::path p(dir);
  if (p.filename().empty()) p = p.parent_path();
  return p.filename().string();
}

void serve(ServeArgs& a) {
  // Signals are taken by sigwait below: block them before any thread (OpenMP, HTTP, engine) starts.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
  std::signal(SIGPIPE, SIG_IGN);  // a client that hangs up must not end the server
  // Every connection is a file descriptor: take all the open files the system allows this process.
  rlimit rl{};
  if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
    rl.rlim_cur = rl.rlim_max;
    setrlimit(RLIMIT_NOFILE, &rl);
  }

  const bool cuda = use_cuda(a.device, "serve");
  if (!a.chunk_given) a.engine.prefill_chunk = default_call_tokens(cuda, a.kernels);
  // Room for decodes beside a whole chunk (a step that cannot hold the waiting chunk leaves them out:
  // runtime/engine_schedule.h).
  if (!a.step_given) a.engine.max_step_tokens = a.engine.prefill_chunk + kDefaultStepDecodeRoom;
  const Tokenizer tok = Tokenizer::load(a.model);
  // A slot per sequence, each of the engine's context (cuda: default the model's, capped), and Model
  // calls of the engine's prefill chunk (a decode batch of every sequence fits one).
  const RunnerRequest r{.cuda = cuda, .numerics = a.numerics, .kernels = a.kernels, .max_seqs = a.engine.max_num_seqs,
                        .max_ctx = a.engine.max_context,
                        .chunk = std::min(a.engine.prefill_chunk, a.engine.max_step_tokens), .ranks = a.ranks,
                        .data_parallel = true};
  const std::unique_ptr<Runner> runner = load_runner(a.model, r, terminal_load_progress(a.model));
  if (!runner) return;  // another rank of a TCP group (WORLD_SIZE): it followed rank 0 to the end
  if (a.engine.speculative != 0 && runner->model().num_mtp() < 1)
    fail("dsv4 serve: --speculative needs an MTP block; ", a.model, " has none on the ", runner->backend_name(), " backend");
  a.engine.prefix_cache_bytes = prefix_cache_budget(a, *runner);
  Engine engine(*runner, tok, a.engine);
  server::ServerContext ctx(engine, tok, a.served_name.empty() ? model_name_of(a.model) : a.served_name);
  ctx.webui = !a.no_webui;
  server::HttpServer http(ctx, a.http);
  const int port = http.bind();
  std::thread accept_thread([&] { http.run(); });
  std::string prefix = a.engine.prefix_cache_bytes > 0 ? cat("prefix cache ", a.engine.prefix_cache_bytes >> 20, " MiB")
                                                       : std::string("no prefix cache");
  if (a.engine.speculative > 0) prefix += cat(", speculative k ", a.engine.speculative);
  if (runner->ranks() > 1) prefix += cat(", ", runner->ranks(), " data-parallel ranks");
  if (runner->has_peers()) prefix += ", expert-parallel ranks with every sequence on rank 0";
  std::printf("dsv4 serve: %s (%s numerics, %s, context %lld, max %d sequences, %s) on http://%s:%d\n",
              ctx.model_name.c_str(), numerics_name(parse_numerics(a.numerics)), cuda ? "cuda" : "cpu",
              (long long)engine.max_context(), a.engine.max_num_seqs, prefix.c_str(), a.http.host.c_str(), port);
  std::fflush(stdout);
  const KvPageInfo kv = runner->model().backend().kv_pages();
  if (kv.page_bytes > 0) {
    const int64_t cap = kv.capacity_tokens();
    std::fprintf(stderr, "dsv4 serve: KV cache %.6g B per token of context (%s, pages of %lld tokens), %s\n",
                 kv.bytes_per_token(), kv.storage.c_str(), (long long)kv.page_tokens,
                 cap < 0 ? "the pool grows as needed" : cat("the pool holds ", cap, " tokens of context").c_str());
  }

  int sig = 0;
  sigwait(&stop_signals, &sig);
  std::fprintf(stderr, "dsv4 serve: %s: finishing running requests (a second signal stops at once)\n", strsignal(sig));
  // A second signal means now: no destructors, no waiting for anything.
  std::thread([stop_signals] {
    int again = 0;
    sigwait(&stop_signals, &again);
    static const char msg[] = "dsv4 serve: second signal: exiting now\n";
    [[maybe_unused]] const ssize_t n = write(STDERR_FILENO, msg, sizeof msg - 1);
    _exit(128 + again);
  }).detach();
  ctx.draining = true;
  http.drain();
  engine.shutdown(std::chrono::milliseconds(int64_t(a.shutdown_timeout * 1000)));
  // The cancelled and finished requests' last bytes go out before the connections close.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (ctx.http.active_streams() > 0 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  http.stop();
  accept_thread.join();
  if (a.stats) print_engine_stats(engine.stats());
  std::fprintf(stderr, "dsv4 serve: stopped\n");
}

}  // namespace

void register_serve(CLI::App& app) {
  auto a = std::make_shared<ServeArgs>();
  CLI::App* c = app.add_subcommand("serve", "OpenAI-compatible HTTP server with continuous batching");
  a->model = default_model_dir();
  c->add_option("-m,--model", a->model, "Model directory (default: the bundled tiny-shakespeare)")->check(existing_dir());
  c->add_option("--numerics", a->numerics, "official | reference")->capture_default_str();
  c->add_option("--host", a->http.host, "Address to listen on")->capture_default_str();
  c->add_option("--port", a->http.port, "Port (0: any free port)")->capture_default_str()->check(CLI::Range(0, 65535));
  c->add_option("--api-key", a->http.api_key, "Require \"Authorization: Bearer KEY\" on /v1 (default: $DSV4_API_KEY)")
      ->envname("DSV4_API_KEY");
  c->add_option("--served-model-name", a->served_name, "The model id clients use (default: the directory's name)");
  c->add_option("--max-num-seqs", a->engine.max_num_seqs, "Sequences generated at once")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  c->add_option("--max-step-tokens", a->engine.max_step_tokens,
                "Tokens (prefill + decode) per engine step (default: the prefill chunk + 512)")
      ->check(CLI::PositiveNumber);
  c->add_option("--prefill-chunk", a->engine.prefill_chunk,
                "Prefill is cut at multiples of this many tokens, the most per model call (default 2048; 512 with "
                "--kernels exact on cuda, the most that stays bit-identical to the CPU)")
      ->check(CLI::PositiveNumber);
  c->add_option("--max-queue", a->engine.max_queue, "Requests waiting for admission before 503")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  c->add_option("--max-model-len", a->engine.max_context, "Context length (default: the model's)")
      ->check(CLI::PositiveNumber);
  c->add_option("--max-tokens-limit", a->engine.max_tokens_limit,
                "Tokens a request may generate: the default when it gives no max_tokens, and the cap when it "
                "asks for more (0: the context)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  c->add_option("--cache-tokens", a->engine.cache_tokens,
                "Cache pool size in tokens (default: max-num-seqs full contexts)")
      ->check(CLI::PositiveNumber);
  auto* no_prefix = c->add_flag("--no-prefix-cache", a->no_prefix_cache,
                                "Do not reuse the state of cached prompt prefixes (docs/server.md \"Prefix cache\")");
  c->add_option("--prefix-cache-mib", a->prefix_cache_mib,
                "MiB of slot snapshots the prefix cache keeps, on each data-parallel rank (default: 1024 on cpu; "
                "on cuda a quarter of the device memory free after loading, shared by the ranks of one GPU)")
      ->check(CLI::PositiveNumber)
      ->excludes(no_prefix);
  c->add_option("--http-threads", a->http.io_threads, "I/O threads serving all connections")
      ->capture_default_str()
      ->check(CLI::Range(1, 256));
  c->add_option("--http-workers", a->http.workers, "Threads running request handlers (parse, submit)")
      ->capture_default_str()
      ->check(CLI::Range(1, 256));
  c->add_option("--max-connections", a->http.max_connections, "Open connections; more get 503")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  c->add_option("--max-body-bytes", a->http.max_body_bytes, "Largest request body; larger get 413")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  c->add_option("--header-timeout", a->http.header_timeout_s, "Seconds for a whole request head; slower get 408")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  c->add_option("--body-timeout", a->http.body_timeout_s,
                "Seconds for a whole request body (408), and the longest a response write may stall")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  c->add_option("--idle-timeout", a->http.idle_timeout_s, "Seconds a keep-alive connection may wait between requests")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  c->add_option("--allowed-origins", a->http.allowed_origins,
                "Origins (scheme://host[:port], or *) whose web pages may call the API (CORS; default: the server's own only)")
      ->delimiter(',');
  c->add_option("--allowed-hosts", a->http.allowed_hosts,
                "Host header names accepted on a loopback bind besides localhost, 127.x.x.x, [::1]")
      ->delimiter(',');
  c->add_option("--shutdown-timeout", a->shutdown_timeout, "Seconds running requests may finish after Ctrl-C")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  c->add_flag("--no-webui", a->no_webui, "Do not serve the chat page at /");
  c->add_option("--speculative", a->engine.speculative,
                "Speculative decoding: MTP block 0 drafts K tokens per verify step, 1-3 (0 = off), for requests "
                "without penalties, grammars or logprobs")
      ->capture_default_str()
      ->check(CLI::Range(0, 3));
  c->add_flag("--stats", a->stats, "Print the engine's counters (speculative acceptance too) on stderr at shutdown");
  add_device_option(*c, a->device, a->kernels);
  add_ranks_option(*c, a->ranks);
  c->callback([a, c] {
    a->chunk_given = c->count("--prefill-chunk") > 0;
    a->step_given = c->count("--max-step-tokens") > 0;
    serve(*a);
  });
}

}  // namespace dsv4::cli
