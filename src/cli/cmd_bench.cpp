// dsv4 bench: decode and prefill timings of the model on the GPU (shared/docs/PERFORMANCE.md), over
// Model::step and Backend::time_ms: decode time per step and per layer at given batch sizes and
// context (a decode call of B sequences, CUDA graph replays, device events), prefill tokens/s, achieved
// GB/s and TFLOP/s against the measured ceilings, each row's floor (the larger of bytes over HBM
// bandwidth and FLOPs over the matrix peak) and its ratio to it; table and JSON. `--kernels both` runs
// the fast and the exact tier one after the other (one model at a time) and prints the speedups. The
// per-layer time is the step minus a step of no layers (StepPlan.layers = 0: embedding and head),
// over the layer count. `--speculative 1,2,3`: the verify step of speculative decoding (k + 1 tokens of
// each of B sequences in one call, runs of k + 1; no CUDA graph, as the engine runs it) against the
// decode step at the same batch, with its floor (a decode of B (k + 1) tokens' bytes and FLOPs).
// `--prefix-reuse 32768`: the time to the first token of a repeated prompt, cold vs from the prefix
// cache's snapshot (restore + the tokens after the last 128-token boundary). `--peer CMD`: a peer
// benchmark of the same shape (tools/hf-eager-bench) run after, with dsv4's speedups (cli/bench_peer.h).
// --device cuda (default; a build without CUDA, or no Hopper GPU, is refused with one line) or cpu (the
// bundled model or a small checkpoint; the floors are the H200's ceilings, the verify rows leave them out).
// `--ranks N` / `--gpus N` (and a TCP group of WORLD_SIZE processes, docs/multi-gpu.md): the model over N
// expert-parallel ranks (runtime/rank_group.h), the routed experts split, rank 0's calls timed while the
// other ranks make each of them with 0 tokens; expert-parallel calls run without CUDA graphs (the
// launches column is then "-"). The floors stay one GPU's (the step's bytes on one device).
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "cli/bench_cost.h"
#include "cli/bench_peer.h"
#include "cli/bench_plot.h"
#include "cli/commands.h"
#include "cli/device.h"
#include "cli/gen_options.h"
#include "core/error.h"
#include "io/config.h"
#include "io/presets.h"
#include "runtime/prefix_cache.h"
#include "runtime/rank_group.h"
#include "runtime/runner.h"

namespace dsv4::cli {
namespace {

constexpr double kHbmGBs = 4260;      // measured device-to-device copy, PERFORMANCE.md
constexpr double kFp8TFlops = 1410;   // measured FP8 dense peak
constexpr double kBf16TFlops = 790;   // measured bf16 dense matrix rate (the head)

struct BenchArgs {
  std::string preset, model, json, moe_prefill = "grouped", kernels = "fast", device = "cuda";
  bool dummy = false;
  int64_t layers = 0, context = 0, chunk = 2048, iters = 30, warmup = 3;
  std::vector<int64_t> batches{1, 8, 32}, prefills{1024, 8192}, speculative{}, prefix_reuse{};
  uint64_t seed = 1234;
  RankFlags ranks;     // --ranks / --gpus: expert-parallel ranks
  BenchPlotArgs plot;  // --plot, --from-json (cli/bench_plot.h)
  BenchPeerArgs peer;  // --peer, --peer-layers (cli/bench_peer.h)
};

void write_json(const std::string& path, const nlohmann::ordered_json& j) {
  std::ofstream f(path);
  if (!f) fail("--json: cannot write ", path);
  f << j.dump(2) << "\n";
}

// Tokens [from, P) of slot `slot` in calls of up to `chunk` (the logits of position P - 1 only, on the
// last call; `head` false: none), through `layers` main layers. A run from position 0 restarts the slot.
void prefill(Model& m, int slot, int64_t from, int64_t P, int64_t chunk, uint64_t seed, int64_t layers, bool head = true) {
  for (int64_t p = from; p < P; p += chunk) {
    Batch b;
    for (int64_t t = p; t < std::min(P, p + chunk); ++t) {
      b.ids.push_back(int32_t((uint64_t(t) * 2654435761u + seed) % uint64_t(m.config().vocab_size)));
      b.positions.push_back(int32_t(t));
      b.slots.push_back(slot);
    }
    b.run_len = b.size();
    const bool last = head && p + chunk >= P;
    m.step(b, StepPlan{.layers = layers, .head_first = b.size() - 1, .head_rows = last ? 1 : 0});
  }
}

// Time to the first token's logits of a P-token prompt seen before, as the prefix cache serves it
// (runtime/prefix_cache.h): cold, the prompt's prefill from position 0 with a snapshot of the slot at
// its last 128-token boundary S < P (where the engine snapshots); warm, that snapshot restored and
// the P - S tokens after it prefilled. Wall time on the device's stream (the host's page bookkeeping
// and copies included), median of the warm repeats.
void prefix_reuse_rows(const BenchArgs& a, Model& m, int64_t layers, int64_t chunk, nlohmann::ordered_json& j) {
  Backend& be = m.backend();
  std::printf("\nprefix reuse: time to the first token's logits of a repeated prompt (cold: its prefill; warm: "
              "the cached prefix restored, the rest prefilled)\n%8s %8s %10s %10s %8s\n",
              "tokens", "cached", "cold ms", "warm ms", "x");
  for (int64_t P : a.prefix_reuse) {
    const int64_t S = (P - 1) / kPrefixBlock * kPrefixBlock;
    std::shared_ptr<const SlotSnapshot> snap;
    const double cold = be.time_ms(0, 1, [&] {
      prefill(m, 0, 0, S, chunk, a.seed, layers, false);
      snap = be.snapshot(0, S, 0);
      prefill(m, 0, S, P, chunk, a.seed, layers);
    });
    const double warm = be.time_ms(1, 5, [&] {
      be.restore(0, *snap);
      prefill(m, 0, S, P, chunk, a.seed, layers);
    });
    snap.reset();
    be.release(0);
    std::printf("%8lld %8lld %10.2f %10.3f %7.1fx\n", (long long)P, (long long)S, cold, warm, cold / warm);
    j["prefix_reuse"].push_back(
        {{"tokens", P}, {"cached", S}, {"chunk", chunk}, {"cold_ms", cold}, {"warm_ms", warm}, {"speedup", cold / warm}});
  }
}

nlohmann::ordered_json run_tier(const BenchArgs& a, KernelTier tier);

// The speculative verify step: k + 1 tokens of each of B sequences at the decode's context (runs of
// k + 1, the logits of every row), against the decode step of B (decode_ms, per --batch entry). Floor:
// a decode of B (k + 1) tokens (distinct experts and KV reads of that many tokens; bytes over HBM,
// FLOPs over the FP8 peak). ratio: verify time / decode time, the tokens per verify a round must yield
// to gain (the MTP drafts and a roll-back come on top).
void verify_rows(const BenchArgs& a, Model& m, int64_t layers, const std::vector<double>& decode_ms,
                 nlohmann::ordered_json& j) {
  const ModelConfig& cfg = m.config();
  const bool cuda = a.device == "cuda";
  std::printf("\nspeculative verify at context %lld (k + 1 tokens per sequence, one call, median of %lld)\n"
              "%6s %3s %7s %10s %10s %7s %10s %6s %10s\n",
              (long long)a.context, (long long)a.iters, "batch", "k", "tokens", "verify ms", "decode ms", "ratio",
              "floor ms", "x", "tok/s max");
  for (size_t bi = 0; bi < a.batches.size(); ++bi) {
    const int64_t B = a.batches[bi];
    for (int64_t k : a.speculative) {
      Batch v;
      for (int64_t b = 0; b < B; ++b)
        for (int64_t t = 0; t <= k; ++t) {
          v.ids.push_back(int32_t((uint64_t(b * 4 + t) * 7919 + 17) % uint64_t(cfg.vocab_size)));
          v.slots.push_back(int32_t(b));
          v.positions.push_back(int32_t(a.context + t));
        }
      v.run_len = k + 1;
      const StepPlan plan{.layers = layers, .head_first = 0, .head_rows = v.size()};
      m.step(v, plan);
      const double ms = m.backend().time_ms(a.warmup, a.iters, [&] { m.replay(v, plan); });
      const StepCost c = decode_cost(cfg, B * (k + 1), a.context);
      const double floor_ms = std::max(c.bytes / (kHbmGBs * 1e9), c.flops / (kFp8TFlops * 1e12)) * 1e3;
      const double ratio = ms / decode_ms[bi];
      // Tokens per second if every draft were accepted (k + 1 tokens per sequence per verify).
      const double best = double(B * (k + 1)) / (ms * 1e-3);
      if (cuda)
        std::printf("%6lld %3lld %7lld %10.3f %10.3f %6.2fx %10.3f %5.1fx %10.0f\n", (long long)B, (long long)k,
                    (long long)v.size(), ms, decode_ms[bi], ratio, floor_ms, ms / floor_ms, best);
      else
        std::printf("%6lld %3lld %7lld %10.3f %10.3f %6.2fx %10s %6s %10.0f\n", (long long)B, (long long)k,
                    (long long)v.size(), ms, decode_ms[bi], ratio, "-", "-", best);
      nlohmann::ordered_json row = {{"batch", B}, {"k", k}, {"tokens", v.size()}, {"context", a.context},
                                    {"verify_ms", ms}, {"decode_ms", decode_ms[bi]}, {"ratio", ratio},
                                    {"tok_s_all_accepted", best}};
      if (cuda) {
        row["floor_ms"] = floor_ms;
        row["floor_ratio"] = ms / floor_ms;
      }
      j["verify"].push_back(row);
    }
  }
  std::printf("(ratio: verify time / decode time at that batch: a round gains when it yields more tokens per "
              "sequence than that)\n");
}

void run_bench(const BenchArgs& a) {
  // A null result: this process is another rank of a TCP group (rank 0 prints and writes).
  if (a.kernels != "both") {
    auto j = run_tier(a, parse_kernel_tier(a.kernels));
    if (j.is_null()) return;
    run_bench_peer(a.peer, {a.batches, a.prefills, a.context}, j);
    if (!a.json.empty()) write_json(a.json, j);
    plot_bench_results(a.plot, j);
    return;
  }
  nlohmann::ordered_json j;
  j["fast"] = run_tier(a, KernelTier::Fast);
  j["exact"] = run_tier(a, KernelTier::Exact);
  if (j["fast"].is_null()) return;
  std::printf("\nfast vs exact (exact time / fast time)\n%6s %10s %10s\n", "batch", "step", "layer");
  const nlohmann::ordered_json f = j["fast"]["decode"], e = j["exact"]["decode"];  // copies: j grows below
  for (size_t i = 0; i < f.size() && i < e.size(); ++i) {
    const double step = e[i]["step_ms"].get<double>() / f[i]["step_ms"].get<double>();
    const double layer = e[i]["layer_us"].get<double>() / f[i]["layer_us"].get<double>();
    std::printf("%6lld %9.2fx %9.2fx\n", (long long)f[i]["batch"].get<int64_t>(), step, layer);
    j["speedup"].push_back({{"batch", f[i]["batch"]}, {"step", step}, {"layer", layer}});
  }
  run_bench_peer(a.peer, {a.batches, a.prefills, a.context}, j);
  if (!a.json.empty()) write_json(a.json, j);
  plot_bench_results(a.plot, j);
}

nlohmann::ordered_json run_tier(const BenchArgs& a, KernelTier tier) {
  const char* tier_name = kernel_tier_name(tier);
  ModelConfig cfg;
  if (!a.preset.empty()) {
    if (!a.dummy) fail("--preset needs --dummy-weights (a preset has no checkpoint)");
    cfg = preset_config(a.preset);
  } else {
    cfg = load_config(a.model);
  }
  if (a.layers > 0) truncate_layers(cfg, a.layers);
  const int64_t maxB = *std::max_element(a.batches.begin(), a.batches.end());
  const int64_t maxP = a.prefills.empty() ? 0 : *std::max_element(a.prefills.begin(), a.prefills.end());
  const int64_t maxK = a.speculative.empty() ? 0 : *std::max_element(a.speculative.begin(), a.speculative.end());
  const int64_t maxR = a.prefix_reuse.empty() ? 0 : *std::max_element(a.prefix_reuse.begin(), a.prefix_reuse.end());
  const bool cuda = a.device == "cuda";
  // Prefill and the context fill run in calls of up to --chunk tokens; a decode batch is one call.
  const BackendOptions o{
      .device = cuda ? Device::Cuda : Device::Cpu,
      .numerics = Numerics::Official,
      .kernels = tier,
      .capacity = {.max_seqs = maxB, .max_ctx = std::max({maxP, maxR, a.context + 1}) + 16,
                   .max_tokens = std::max(std::min(a.chunk, std::max<int64_t>({maxP, maxR, a.context, 1})), maxB * (maxK + 1))},
      .grouped_moe_prefill = a.moe_prefill == "grouped"};
  const int64_t chunk = o.capacity.max_tokens;
  const std::string what = a.preset.empty() ? a.model : "preset " + a.preset;
  const RankSpec spec = rank_spec(a.ranks, cuda, false);
  const int ranks = spec.tcp ? spec.tcp->world_size : spec.ranks;
  std::fprintf(stderr, "bench: %s, %lld layers, %s weights%s\n", what.c_str(), (long long)cfg.num_layers,
               a.dummy ? "dummy" : "checkpoint", ranks > 1 ? cat(", ", ranks, " expert-parallel ranks").c_str() : "");
  // A checkpoint loads whole; --layers then runs its first layers (StepPlan.layers). Every rank makes the
  // same dummy weights (the seed) and keeps its experts.
  const ModelFactory make = [&](const BackendOptions& ro, const LoadProgress& p) {
    return a.dummy ? Model::dummy(cfg, ro, a.seed, p) : Model::load(a.model, ro, p);
  };
  const std::unique_ptr<Runner> runner = load_ranked(make, o, spec, terminal_load_progress(what));
  if (!runner) return {};  // another rank of a TCP group: it made rank 0's calls
  Model& m = runner->model();
  Backend& be = m.backend();
  const int64_t layers = cfg.num_layers;
  const BackendInfo info = be.info();

  nlohmann::ordered_json j;
  j["device"] = info.device;
  j["model"] = what;
  j["layers"] = cfg.num_layers;
  j["moe_prefill"] = a.moe_prefill;
  j["kernels"] = tier_name;
  j["ranks"] = ranks;
  j["weights_device_bytes"] = info.weight_bytes;
  j["free_bytes"] = info.free_bytes;
  j["ceilings"] = {{"hbm_GBs", kHbmGBs}, {"fp8_TFLOPs", kFp8TFlops}, {"bf16_TFLOPs", kBf16TFlops}};
  const double L = double(cfg.num_layers);

  std::printf("dsv4 bench: %s, %lld layers, %s kernels, %s, weights %.2f GiB on device%s, %.1f GiB free\n",
              what.c_str(), (long long)cfg.num_layers, tier_name, info.device.c_str(),
              double(info.weight_bytes) / (1 << 30), ranks > 1 ? cat(" (rank 0 of ", ranks, ")").c_str() : "",
              double(info.free_bytes) / (1 << 30));
  const KvPageInfo kv = be.kv_pages();
  if (kv.page_bytes > 0) {
    std::printf("kv cache: %.6g B per token of context over the %lld layers (%s), a pool of %lld pages of %lld tokens\n",
                kv.bytes_per_token(), (long long)m.config().num_layers, kv.storage.c_str(), (long long)kv.capacity,
                (long long)kv.page_tokens);
    j["kv"] = {{"bytes_per_token", kv.bytes_per_token()}, {"storage", kv.storage}, {"pages", kv.capacity},
               {"page_tokens", kv.page_tokens}, {"page_bytes", kv.page_bytes}};
  }

  // Prefill.
  if (std::any_of(a.prefills.begin(), a.prefills.end(), [](int64_t P) { return P > 0; }))  // `--prefill ''`: {0}
    std::printf("\nprefill (chunks of %lld)\n%8s %10s %10s %9s %8s %10s %6s\n", (long long)chunk, "tokens",
                "ms", "tok/s", "TFLOP/s", "of peak", "floor ms", "x");
  for (int64_t P : a.prefills) {
    if (P <= 0) continue;
    const double ms = be.time_ms(1, 3, [&] { prefill(m, 0, 0, P, chunk, a.seed, layers); });
    const StepCost c = prefill_cost(cfg, P);
    const double tflops = c.flops / (ms * 1e-3) / 1e12;
    const double floor_ms = std::max(c.flops / (kFp8TFlops * 1e12), c.bytes / (kHbmGBs * 1e9)) * 1e3;
    std::printf("%8lld %10.2f %10.0f %9.1f %7.1f%% %10.2f %5.1fx\n", (long long)P, ms, double(P) / (ms * 1e-3), tflops,
                100 * tflops / kFp8TFlops, floor_ms, ms / floor_ms);
    j["prefill"].push_back({{"tokens", P}, {"ms", ms}, {"tok_s", double(P) / (ms * 1e-3)}, {"tflops", tflops},
                            {"of_fp8_peak", tflops / kFp8TFlops}, {"flops", c.flops}, {"floor_ms", floor_ms},
                            {"ratio", ms / floor_ms}});
  }

  // Context: every slot's state filled to `context` tokens, by prefill chunks.
  if (a.context > 0) {
    const double ms = be.time_ms(0, 1, [&] {
      for (int64_t s = 0; s < maxB; ++s) prefill(m, int(s), 0, a.context, chunk, a.seed + uint64_t(s), layers);
    });
    std::printf("\ncontext fill: %lld slots x %lld tokens in chunks of %lld: %.2f s (%.0f tok/s)\n", (long long)maxB,
                (long long)a.context, (long long)chunk, ms * 1e-3, double(maxB * a.context) / (ms * 1e-3));
    j["context_fill"] = {{"slots", maxB}, {"tokens", a.context}, {"chunk", chunk}, {"ms", ms}};
  }

  std::vector<double> decode_ms;  // per --batch entry: the decode step
  std::printf("\ndecode at context %lld (CUDA graph, median of %lld; floors: bytes / HBM, FLOPs / peak)\n"
              "%6s %10s %10s %9s %6s %10s %9s %6s %9s %8s %9s %10s %9s\n",
              (long long)a.context, (long long)a.iters, "batch", "step ms", "layer us", "floor us", "x", "head us",
              "floor us", "x", "GB/s", "of HBM", "TFLOP/s", "tok/s", "launches");
  for (int64_t B : a.batches) {
    Batch batch;
    for (int64_t b = 0; b < B; ++b) {
      batch.ids.push_back(int32_t((uint64_t(b) * 7919 + 17) % uint64_t(cfg.vocab_size)));
      batch.slots.push_back(int32_t(b));
      batch.positions.push_back(int32_t(a.context));
    }
    const StepPlan full{.layers = layers, .head_first = 0, .head_rows = B};
    const StepPlan none{.layers = 0, .head_first = 0, .head_rows = B};  // embedding + head
    m.step(batch, full);  // uploads the inputs; the first call of a shape captures its graph
    m.replay(batch, none);
    // Graph replays on the uploaded inputs, as the engine's steps run them (the upload is ~3 small copies).
    const double step = be.time_ms(a.warmup, a.iters, [&] { m.replay(batch, full); });
    const int64_t step_kernels = be.last_graph_kernels();
    const double head = be.time_ms(a.warmup, a.iters, [&] { m.replay(batch, none); });
    const int64_t head_kernels = be.last_graph_kernels();
    // Kernel launches per layer: the decode graph's kernel nodes less the embedding + head graph's.
    const double launches = step_kernels >= 0 && head_kernels >= 0 ? double(step_kernels - head_kernels) / double(L) : -1;
    const double layer_us = (step - head) * 1e3 / L;
    const StepCost c = decode_cost(cfg, B, a.context);
    const double gbs = c.bytes / (step * 1e-3) / 1e9, tflops = c.flops / (step * 1e-3) / 1e12;
    double lbytes = 0;
    for (int64_t i = 0; i < cfg.num_layers; ++i) lbytes += layer_decode_cost(cfg, i, B, a.context).bytes;
    const double layer_gbs = lbytes / L / (layer_us * 1e-6) / 1e9;
    double lflops = 0;
    for (int64_t i = 0; i < cfg.num_layers; ++i) lflops += layer_decode_cost(cfg, i, B, a.context).flops;
    const double layer_floor = std::max(lbytes / L / (kHbmGBs * 1e9), lflops / L / (kFp8TFlops * 1e12)) * 1e6;
    const double V = double(cfg.vocab_size), D = double(cfg.hidden_size);  // the head: bf16 [V, D]
    const double head_floor = std::max(V * D * 2 / (kHbmGBs * 1e9), 2 * double(B) * V * D / (kBf16TFlops * 1e12)) * 1e6;
    char launch_col[32] = "        -";
    if (launches >= 0) std::snprintf(launch_col, sizeof launch_col, "%9.1f", launches);
    std::printf("%6lld %10.3f %10.1f %9.1f %5.1fx %10.1f %9.1f %5.1fx %9.0f %7.1f%% %9.2f %10.0f %s\n", (long long)B,
                step, layer_us, layer_floor, layer_us / layer_floor, head * 1e3, head_floor, head * 1e3 / head_floor,
                gbs, 100 * gbs / kHbmGBs, tflops, double(B) / (step * 1e-3), launch_col);
    j["decode"].push_back({{"batch", B}, {"context", a.context}, {"step_ms", step}, {"layer_us", layer_us},
                           {"embed_head_us", head * 1e3}, {"bytes", c.bytes}, {"GBs", gbs}, {"of_hbm", gbs / kHbmGBs},
                           {"layer_bytes", lbytes / L}, {"layer_GBs", layer_gbs},
                           {"layer_floor_us", layer_floor}, {"layer_ratio", layer_us / layer_floor},
                           {"head_floor_us", head_floor}, {"head_ratio", head * 1e3 / head_floor}, {"tflops", tflops},
                           {"tok_s", double(B) / (step * 1e-3)}});
    if (launches >= 0) j["decode"].back()["layer_launches"] = launches;
    decode_ms.push_back(step);
  }
  if (!a.speculative.empty()) verify_rows(a, m, layers, decode_ms, j);
  std::printf("(bytes: checkpoint-format weights the step must read, expected distinct experts, KV rows; "
              "ceilings %.0f GB/s, %.0f FP8 / %.0f bf16 TFLOP/s; head us: embedding + hc_head + norm + logits; "
              "launches: kernel launches per layer in the decode graph, - without one)\n",
              kHbmGBs, kFp8TFlops, kBf16TFlops);
  if (!a.prefix_reuse.empty()) prefix_reuse_rows(a, m, layers, chunk, j);
  return j;
}

}  // namespace

void register_bench(CLI::App& app) {
  auto a = std::make_shared<BenchArgs>();
  CLI::App* c = app.add_subcommand("bench", "Time the model: decode per step / per layer, prefill, speculative verify (GPU; --device cpu for small models)");
  auto* preset = c->add_option("--preset", a->preset, "Published shapes without a checkpoint: flash | pro")
                     ->check(CLI::IsMember({"flash", "pro"}));
  c->add_option("-m,--model", a->model, "Model directory (instead of --preset)")->excludes(preset);
  c->add_flag("--dummy-weights", a->dummy, "Random weights in the checkpoint formats (no checkpoint read)");
  c->add_option("--layers", a->layers, "Keep only the first N layers (so the model fits one GPU)")
      ->check(CLI::Range(int64_t(1), int64_t(1000)));
  c->add_option("--batch", a->batches, "Decode batch sizes")->delimiter(',')->capture_default_str();
  c->add_option("--context", a->context, "Decode at this context length (each slot's state filled first)")
      ->capture_default_str();
  c->add_option("--prefill", a->prefills, "Prefill prompt lengths (empty: none)")->delimiter(',')->capture_default_str();
  c->add_option("--chunk", a->chunk, "Prefill chunk (tokens per forward)")->capture_default_str();
  c->add_option("--iters", a->iters, "Timed decode replays per configuration")->capture_default_str();
  c->add_option("--warmup", a->warmup, "Untimed replays first")->capture_default_str();
  c->add_option("--seed", a->seed, "Dummy weight seed")->capture_default_str();
  c->add_option("--moe-prefill", a->moe_prefill,
                 "Routed experts of prefill chunks above 512 tokens: grouped (tensor cores) | gemv (per token)")
      ->check(CLI::IsMember({"grouped", "gemv"}))
      ->capture_default_str();
  c->add_option("--kernels", a->kernels, "fast | exact | both (one after the other, with the speedups)")
      ->check(CLI::IsMember({"fast", "exact", "both"}))
      ->capture_default_str();
  c->add_option("--speculative", a->speculative,
                "Also time the speculative verify step of K+1 tokens per sequence for these K (1-3), e.g. 1,2,3")
      ->delimiter(',')
      ->check(CLI::Range(int64_t(1), int64_t(3)));
  c->add_option("--prefix-reuse", a->prefix_reuse,
                "Also time a repeated prompt of these lengths cold vs from the prefix cache (restore + the rest), e.g. 32768")
      ->delimiter(',')
      ->check(CLI::Range(kPrefixBlock + 1, int64_t(1) << 22));
  c->add_option("--device", a->device, "cuda | cpu (cpu: a small checkpoint such as the bundled model)")
      ->check(CLI::IsMember({"cuda", "cpu"}))
      ->capture_default_str();
  c->add_option("--json", a->json, "Also write the results as JSON to FILE");
  add_ranks_option(*c, a->ranks);
  add_bench_plot_options(*c, a->plot);
  add_bench_peer_options(*c, a->peer);
  c->callback([a] {
    if (replot_bench_json(a->plot)) return;  // --from-json: no run, no GPU
    if (a->device == "cuda") require_cuda("bench");
    if (a->device == "cpu" && a->kernels == "both") fail("dsv4 bench --device cpu: --kernels both is for cuda (the CPU has one tier)");
    if (a->preset.empty() && a->model.empty()) a->model = default_model_dir();
    run_bench(*a);
  });
}

}  // namespace dsv4::cli
