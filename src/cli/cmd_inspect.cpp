// dsv4 inspect DIR: what a checkpoint is (config summary), what it holds (tensor inventory by format),
// what it needs (memory), and every check that failed. Exit code 1 when any check failed.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <map>

#include "cli/commands.h"
#include "cli/flags.h"
#include "core/error.h"
#include "io/config.h"
#include "io/safetensors.h"
#include "io/weights.h"

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
}

int run_inspect(const std::string& dir, bool list) {
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
    std::printf("linears\n");
    for (const auto& [f, v] : fmt)
      std::printf("  %-18s %6d  %s\n", weight_format_name(f), v.first, human_bytes(double(v.second)).c_str());
    std::printf("mtp         %zu block(s) in checkpoint\n", w.mtp.size());
    double f32_bytes = 0;  // the CPU backend decodes every weight to float32 (packed FP4: 2 per byte)
    for (const TensorEntry* e : ckpt->all())
      f32_bytes += 4.0 * double(e->view.numel()) * (e->view.dtype == DType::I8 ? 2 : 1);
    std::printf("memory      weights as stored %s; CPU backend (float32) %s\n",
                human_bytes(double(ckpt->total_bytes())).c_str(), human_bytes(f32_bytes).c_str());
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
  auto dir = std::make_shared<std::string>(default_model_dir());
  auto list = std::make_shared<bool>(false);
  CLI::App* c = app.add_subcommand("inspect", "Summarize a checkpoint: config, tensors, formats, memory, problems");
  auto* pos = c->add_option("dir", *dir, "Model directory (default: the bundled model)")->check(existing_dir());
  c->add_option("-m,--model", *dir, "Model directory (the same as DIR)")->check(existing_dir())->excludes(pos);
  c->add_flag("--tensors", *list, "List every tensor with dtype and shape");
  c->callback([dir, list] {
    int rc = run_inspect(*dir, *list);
    if (rc) throw CLI::RuntimeError(rc);
  });
}

}  // namespace dsv4::cli
