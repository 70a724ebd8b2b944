// dsv4 inspect DIR: what a checkpoint is (config summary), what it holds (tensor inventory by format),
// what it needs (memory: the per-GPU plan for --gpus N, io/memory_plan.h), and every check that
// failed. Exit code 1 when any check failed. `--preset flash|pro` plans a published model without its
// checkpoint.
#include <CLI/CLI.hpp>

#include <cmath>
#include <cstdio>
#include <map>
#include <optional>

#include "cli/commands.h"
#include "cli/device.h"
#include "cli/flags.h"
#include "core/error.h"
#include "io/config.h"
#include "io/kv_size.h"
#include "io/memory_plan.h"
#include "io/presets.h"
#include "io/safetensors.h"
#include "io/variant.h"
#include "io/weights.h"
#ifdef DSV4_HAVE_CUDA
#include <cuda_runtime.h>
#endif

namespace dsv4::cli {
namespace {

std::string human_bytes(double b) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (b >= 1024 && u < 4) {
    b /= 1024;
    ++u;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, u ? "%.2f %s" : "%.0f %s", b, units[u]);
  return buf;
}

// KV cache per token of context (compact records, what both backends' pools hold in official numerics,
// vs bf16 rows) and the window rings every sequence holds (records on the CPU, bf16 rows on the GPU)
// (io/kv_size.h, docs/kv-records.md).
void print_kv_cache(const ModelConfig& c) {
  const KvBytes bf = kv_bytes(c, KvStorage::Bf16);
  try {
    const KvBytes k = kv_bytes(c, KvStorage::Compact);
    std::printf("kv cache    %.6g B per token of context in compact records (entry %lld B, indexer key %lld B; "
                "as bf16 rows %.6g B)\n",
                k.per_token(), (long long)k.entry_bytes, (long long)k.index_key_bytes, bf.per_token());
    std::printf("            window rings %s per sequence as records (cpu), %s as bf16 rows (cuda) (%lld layers x "
                "%lld rows)\n",
                human_bytes(double(k.window_per_sequence)).c_str(), human_bytes(double(bf.window_per_sequence)).c_str(),
                (long long)k.window_layers, (long long)c.sliding_window);
  } catch (const Error& e) {
    std::printf("kv cache    %.6g B per token of context as bf16 rows, window rings %s per sequence; %s\n",
                bf.per_token(), human_bytes(double(bf.window_per_sequence)).c_str(), e.what());
  }
}

void print_config(const ModelConfig& c) {
  std::map<AttnKind, int> kinds;
  int hash = 0;
  std::string pattern;
  for (const auto& l : c.layers) {
    ++kinds[l.attn];
    hash += l.route == RouteKind::Hash;
    pattern += l.attn == AttnKind::Sliding ? "S" : l.attn == AttnKind::CSA ? "C" : "H";
  }
  std::printf("config      %s (%s form)\n", c.source.c_str(), c.form.c_str());
  std::printf("model       hidden %lld, %lld layers, %lld heads x %lld (rope %lld), vocab %lld\n",
              (long long)c.hidden_size, (long long)c.num_layers, (long long)c.num_heads, (long long)c.head_dim,
              (long long)c.rope_dim, (long long)c.vocab_size);
  std::printf("attention   %s  (S sliding %d, C CSA %d, H HCA %d); window %lld, q_lora %lld, o %lldx%lld\n",
              pattern.c_str(), kinds[AttnKind::Sliding], kinds[AttnKind::CSA], kinds[AttnKind::HCA],
              (long long)c.sliding_window, (long long)c.q_lora_rank, (long long)c.o_groups, (long long)c.o_lora_rank);
  for (const auto& l : c.layers)
    if (l.attn != AttnKind::Sliding) {
      std::printf("compress    ratios:");
      for (const auto& m : c.layers) std::printf(" %d", m.ratio);
      std::printf("\n");
      break;
    }
  if (kinds[AttnKind::CSA])
    std::printf("indexer     %lld heads x %lld, top-k %lld\n", (long long)c.index_n_heads, (long long)c.index_head_dim,
                (long long)c.index_topk);
  std::printf("moe         %lld experts (+%lld shared), %lld per token, inner %lld, scale %g, clamp %g, %d hash layers\n",
              (long long)c.n_routed_experts, (long long)c.n_shared_experts, (long long)c.experts_per_tok,
              (long long)c.moe_inter_dim, c.routed_scaling_factor, c.swiglu_limit, hash);
  std::printf("mhc         %lld streams, %lld Sinkhorn iterations\n", (long long)c.hc_mult, (long long)c.hc_sinkhorn_iters);
  std::printf("rope        main theta %g; compress theta %g%s\n", c.rope_main.theta, c.rope_compress.theta,
              c.rope_compress.yarn ? " + YaRN" : "");
  std::printf("mtp         %zu block(s) in config\n", c.mtp_layers.size());
  if (c.dspark.present()) {
    std::printf("dspark      block %lld, noise token %lld, markov rank %lld, target layers", (long long)c.dspark.block_size,
                (long long)c.dspark.noise_token_id, (long long)c.dspark.markov_rank);
    for (int64_t t : c.dspark.target_layer_ids) std::printf(" %lld", (long long)t);
    std::printf("\n");
  }
  print_kv_cache(c);
  if (!c.expert_dtype.empty() || !c.moe_quant_algo.empty())
    std::printf("quant       expert_dtype %s, moe_quant_algo %s (the loader reads each tensor's format)\n",
                c.expert_dtype.empty() ? "-" : c.expert_dtype.c_str(), c.moe_quant_algo.empty() ? "-" : c.moe_quant_algo.c_str());
}

// Routed-expert format of each block, run-length grouped: "layers 0-5 nvfp4 1x16; mtp.0 fp4-e2m1 1x32".
void print_expert_formats(const Weights& w) {
  std::vector<std::pair<std::string, std::string>> rows;  // (block, format)
  auto add = [&](const std::string& name, const BlockWeights& b) {
    std::optional<WeightFormat> f = expert_format(b);
    std::string fs = f ? weight_format_name(*f) : "mixed or missing";
    if (f == WeightFormat::NVFP4) {
      size_t shared = 0;
      for (const auto& e : b.ffn.experts) shared += w13_share_global_scale(e);
      fs += cat(", w1/w3 share weight_scale_2 in ", shared, "/", b.ffn.experts.size());
    }
    rows.emplace_back(name, fs);
  };
  for (size_t i = 0; i < w.layers.size(); ++i) add(cat("layer ", i), w.layers[i]);
  for (size_t k = 0; k < w.mtp.size(); ++k) add(cat("mtp.", k, " (MTP)"), w.mtp[k].block);
  for (size_t k = 0; k < w.dspark.size(); ++k) add(cat("mtp.", k, " (DSpark)"), w.dspark[k].block);
  std::printf("experts\n");
  for (size_t i = 0; i < rows.size();) {
    size_t j = i;
    while (j + 1 < rows.size() && rows[j + 1].second == rows[i].second && rows[j + 1].first.rfind("layer ", 0) == 0 &&
           rows[i].first.rfind("layer ", 0) == 0)
      ++j;
    const std::string who = j == i ? rows[i].first : cat(rows[i].first, "-", rows[j].first.substr(6));
    std::printf("  %-20s %s\n", who.c_str(), rows[i].second.c_str());
    i = j + 1;
  }
}

struct InspectArgs {
  std::string dir, preset;
  bool list = false;
  MemoryPlanOptions plan;
  double gpu_memory_gib = 0;  // --gpu-memory (0: the GPU's free memory when there is one)
};

// The memory one GPU has for the check, and where the number comes from; nullopt when unknown (a CPU
// build or no GPU, and no --gpu-memory).
std::optional<std::pair<uint64_t, std::string>> gpu_memory(const InspectArgs& a) {
  if (a.gpu_memory_gib > 0) return std::make_pair(uint64_t(a.gpu_memory_gib * double(uint64_t(1) << 30)), std::string("--gpu-memory"));
#ifdef DSV4_HAVE_CUDA
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices < 1) return std::nullopt;
  uint64_t least = UINT64_MAX;
  const int n = std::min(devices, a.plan.gpus);
  for (int d = 0; d < n; ++d) {
    size_t free_b = 0, total_b = 0;
    if (cudaSetDevice(d) != cudaSuccess || cudaMemGetInfo(&free_b, &total_b) != cudaSuccess) return std::nullopt;
    least = std::min<uint64_t>(least, free_b);
  }
  return std::make_pair(least, cat("free on ", n == 1 ? "GPU 0" : cat("the least free of GPUs 0-", n - 1),
                                   devices < a.plan.gpus ? cat(" (", devices, " present, --gpus ", a.plan.gpus, ")") : ""));
#else
  return std::nullopt;
#endif
}

// The plan's lines, and its check as a problem when it does not fit.
void print_memory_plan(const ModelConfig& cfg, const WeightInventory& w, const InspectArgs& a,
                       std::vector<std::string>& problems) {
  MemoryPlan p;
  try {
    p = plan_memory(cfg, w, a.plan);
  } catch (const Error& e) {
    problems.push_back(e.what());
    return;
  }
  const GpuPlan& g = p.largest();
  const MemoryPlanOptions& o = p.options;
  std::printf("memory plan %d GPU(s), expert parallel: %lld of %lld routed experts per layer on each; "
              "%lld position(s) x %lld sequence(s) per GPU, calls of %lld tokens\n",
              o.gpus, (long long)g.experts, (long long)cfg.n_routed_experts, (long long)o.context,
              (long long)g.sequences, (long long)std::max(o.max_tokens, g.sequences));
  std::printf("  per GPU   %s: weights %s (replicated %s, routed experts %s), KV %s, workspace %s\n",
              human_bytes(double(g.total())).c_str(), human_bytes(double(g.weights)).c_str(),
              human_bytes(double(w.replicated)).c_str(), human_bytes(double(g.weights - w.replicated)).c_str(),
              human_bytes(double(g.kv)).c_str(), human_bytes(double(g.workspace)).c_str());
  if (o.gpus > 1)
    for (const GpuPlan& x : p.gpus)
      std::printf("  GPU %-5d experts %lld-%lld, %s\n", x.gpu, (long long)x.first_expert,
                  (long long)(x.first_expert + x.experts - 1), human_bytes(double(x.total())).c_str());
  const auto have = gpu_memory(a);
  if (!have) {
    std::printf("  fits      not checked (no GPU here: --gpu-memory GIB checks against a size)\n");
    return;
  }
  try {
    check_memory(cfg, w, o, have->first);
    std::printf("  fits      %s of %s (%s)\n", human_bytes(double(g.total())).c_str(),
                human_bytes(double(have->first)).c_str(), have->second.c_str());
    // What the rest of the memory holds of KV pages: tokens of context over all of this GPU's sequences.
    try {
      const double per_token = kv_bytes(cfg, KvStorage::Compact).per_token();
      if (per_token > 0)
        std::printf("  kv room   about %.0f more tokens of context in the memory left (%.6g B each, compact records)\n",
                    std::floor(double(have->first - g.total()) / per_token), per_token);
    } catch (const Error&) {
      // no compact records for these widths: the pool holds rows; nothing to add
    }
  } catch (const Error& e) {
    problems.push_back(cat(e.what(), " (", have->second, ")"));
  }
}

int run_preset(const InspectArgs& a) {
  std::vector<std::string> problems;
  const ModelConfig cfg = preset_config(a.preset);
  print_config(cfg);
  const WeightInventory w = published_weight_inventory(cfg, true);  // the GPU's default (fast) tier
  std::printf("weights     %s as published (no checkpoint read)\n", human_bytes(double(w.stored)).c_str());
  print_memory_plan(cfg, w, a, problems);
  if (problems.empty()) return 0;
  std::printf("checks      %zu problem(s):\n", problems.size());
  for (const auto& p : problems) std::printf("  - %s\n", p.c_str());
  return 1;
}

int run_inspect(const InspectArgs& a) {
  if (!a.preset.empty()) return run_preset(a);
  const std::string& dir = a.dir;
  const bool list = a.list;
  std::vector<std::string> problems;
  ModelConfig cfg;
  bool have_cfg = false;
  try {
    cfg = load_config(dir);
    have_cfg = true;
    print_config(cfg);
  } catch (const Error& e) {
    problems.push_back(e.what());
  }
  std::unique_ptr<Checkpoint> ckpt;
  try {
    ckpt = Checkpoint::open(dir);
  } catch (const Error& e) {
    problems.push_back(e.what());
  }
  if (ckpt) {
    std::map<std::string, std::pair<int, uint64_t>> by_dtype;
    for (const TensorEntry* e : ckpt->all()) {
      auto& d = by_dtype[std::string(dtype_name(e->view.dtype))];
      ++d.first;
      d.second += e->view.nbytes;
      if (list)
        std::printf("  %-60s %-8s %s\n", e->name.c_str(), std::string(dtype_name(e->view.dtype)).c_str(),
                    shape_str(e->view.shape).c_str());
    }
    std::printf("tensors     %zu in %zu file(s), %s\n", ckpt->all().size(), ckpt->files().size(),
                human_bytes(double(ckpt->total_bytes())).c_str());
    for (const auto& [dt, v] : by_dtype)
      std::printf("  %-8s %6d tensors  %s\n", dt.c_str(), v.first, human_bytes(double(v.second)).c_str());
  }
  if (have_cfg && ckpt) {
    Weights w = bind_weights(cfg, *ckpt, &problems);
    std::map<WeightFormat, std::pair<int, uint64_t>> fmt;
    auto count = [&](const LinearWeight& l) {
      if (!l.present()) return;
      ++fmt[l.format].first;
      fmt[l.format].second += l.bytes();
    };
    auto block = [&](const BlockWeights& b) {
      for (const auto* l : {&b.attn.wq_a, &b.attn.wq_b, &b.attn.wkv, &b.attn.wo_a, &b.attn.wo_b, &b.ffn.gate}) count(*l);
      for (const auto& e : b.ffn.experts) count(e.w1), count(e.w2), count(e.w3);
      count(b.ffn.shared.w1), count(b.ffn.shared.w2), count(b.ffn.shared.w3);
    };
    count(w.head);
    for (const auto& b : w.layers) block(b);
    for (const auto& m : w.mtp) block(m.block), count(m.e_proj), count(m.h_proj);
    for (const auto& d : w.dspark) block(d.block), count(d.main_proj);
    std::printf("linears\n");
    for (const auto& [f, v] : fmt)
      std::printf("  %-18s %6d  %s\n", weight_format_name(f), v.first, human_bytes(double(v.second)).c_str());
    print_expert_formats(w);
    std::printf("mtp         %zu block(s) in checkpoint\n", w.mtp.size());
    if (!w.dspark.empty()) std::printf("dspark      %zu stage(s) in checkpoint\n", w.dspark.size());
    std::printf("variant     %s\n", variant_name(cfg, w).c_str());
    double f32_bytes = 0;  // the CPU backend decodes every weight to float32 (packed FP4: 2 per byte)
    for (const TensorEntry* e : ckpt->all())
      f32_bytes += 4.0 * double(e->view.numel()) * (e->view.dtype == DType::I8 || e->view.dtype == DType::U8 ? 2 : 1);
    std::printf("memory      weights as stored %s; CPU backend (float32) %s\n",
                human_bytes(double(ckpt->total_bytes())).c_str(), human_bytes(f32_bytes).c_str());
    print_memory_plan(cfg, weight_inventory(cfg, w, true), a, problems);  // the GPU's default (fast) tier
    for (const auto& u : w.unused) problems.push_back("unexpected tensor '" + u + "' (not used by the model)");
  }
  if (problems.empty()) {
    std::printf("checks      all passed\n");
    return 0;
  }
  std::printf("checks      %zu problem(s):\n", problems.size());
  for (const auto& p : problems) std::printf("  - %s\n", p.c_str());
  return 1;
}

}  // namespace

void register_inspect(CLI::App& app) {
  auto a = std::make_shared<InspectArgs>();
  a->dir = default_model_dir();
  a->plan.context = kCudaDefaultContext;
  a->plan.max_tokens = kDefaultCallTokens;  // the commands' Model calls (cli/device.h)
  CLI::App* c = app.add_subcommand("inspect", "Summarize a checkpoint: config, tensors, formats, memory, problems");
  auto* pos = c->add_option("dir", a->dir, "Model directory (default: the bundled model)")->check(existing_dir());
  auto* m = c->add_option("-m,--model", a->dir, "Model directory (the same as DIR)")->check(existing_dir())->excludes(pos);
  c->add_option("--preset", a->preset, "Plan a published model without its checkpoint: flash | pro")
      ->check(one_of({"flash", "pro"}))
      ->excludes(pos)
      ->excludes(m);
  c->add_flag("--tensors", a->list, "List every tensor with dtype and shape");
  c->add_option("--gpus", a->plan.gpus, "Memory plan for N GPUs: routed experts split across them (default 1)")
      ->check(int_in(1, 4096));
  c->add_option("-c,--ctx-size", a->plan.context, "Memory plan: positions per sequence (default 4096)")
      ->check(int_in(1, int64_t(1) << 40));
  c->add_option("--max-num-seqs", a->plan.sequences, "Memory plan: sequences at once over all GPUs (default 1)")
      ->check(int_in(1, int64_t(1) << 30));
  c->add_option("--prefill-chunk", a->plan.max_tokens, "Memory plan: tokens per forward call (default 2048, the commands' prefill pieces)")
      ->check(int_in(1, int64_t(1) << 30));
  c->add_option("--gpu-memory", a->gpu_memory_gib,
                "Memory plan: check against GIB per GPU (default: the GPU's free memory; none on a CPU)")
      ->check(number_in(0.001, 1e6));
  c->callback([a] {
    int rc = run_inspect(*a);
    if (rc) throw CLI::RuntimeError(rc);
  });
}

}  // namespace dsv4::cli
