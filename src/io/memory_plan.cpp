#include "io/memory_plan.h"

#include <algorithm>
#include <cstdio>

#include "core/dtype.h"
#include "core/error.h"
#include "io/kv_size.h"
#include "io/published_weights.h"

namespace dsv4 {

uint64_t WeightInventory::routed() const {
  uint64_t s = 0;
  for (const auto& block : experts)
    for (uint64_t e : block) s += e;
  return s;
}

double gib(uint64_t bytes) { return double(bytes) / double(uint64_t(1) << 30); }

namespace {

constexpr uint64_t kBf16 = 2, kF32 = 4, kI32 = 4;

uint64_t ceil_div(uint64_t a, uint64_t b) { return (a + b - 1) / b; }
uint64_t round16(uint64_t n) { return ceil_div(n, 16) * 16; }

// ---- Weights as the GPU holds them (memory_plan.h).

// Tensor sizes of one part (a block, the root tensors) as stored and as the GPU holds them.
struct Bytes {
  uint64_t device = 0, stored = 0;
  // A linear weight: `as_bf16` for the ones the GPU runs as a bf16 matmul whatever their storage.
  void linear(const LinearWeight& l, bool as_bf16 = false) {
    if (l.weight.nbytes == 0) return;  // absent (bind_weights reported it)
    stored += l.bytes();
    const uint64_t out = uint64_t(l.out), in = uint64_t(l.in);
    if (as_bf16 || l.format == WeightFormat::Dense)
      device += out * in * kBf16;
    else if (l.format == WeightFormat::FP8)  // codes + fp32 scales, rows of blocks padded to 4 (upload_fp8_weight)
      device += out * in + ceil_div(out, 128) * (ceil_div(ceil_div(in, 128), 4) * 4) * kF32;
    else  // packed FP4 / NVFP4: as stored (re-tiled, same bytes)
      device += l.bytes();
  }
  void param(const TensorView& v, uint64_t element_bytes = kF32) {
    stored += v.nbytes;
    if (v.nbytes) device += uint64_t(v.numel()) * element_bytes;
  }
  void hc(const HcWeights& h) { param(h.fn), param(h.base), param(h.scale); }
  void compressor(const CompressorWeights& c) {
    linear(c.wkv, true), linear(c.wgate, true), param(c.ape), param(c.norm);
  }
};

// One block: the replicated part into `inv.replicated`, each routed expert into a new `inv.experts` row.
void add_block(const ModelConfig& cfg, const BlockWeights& b, WeightInventory& inv, bool fast_tier) {
  Bytes r;
  r.hc(b.hc_attn), r.hc(b.hc_ffn), r.param(b.attn_norm), r.param(b.ffn_norm);
  const AttentionWeights& a = b.attn;
  r.linear(a.wq_a), r.linear(a.wq_b), r.linear(a.wkv), r.linear(a.wo_b);
  // wo_a: a bf16 matrix, or in the CUDA fast tier its FP8 codes and scales where they fit (wo_a_as_codes).
  const bool codes = fast_tier && wo_a_as_codes(cfg, a.wo_a);
  r.linear(a.wo_a, !codes);
  inv.wo_a_codes = inv.wo_a_codes || codes;
  r.param(a.q_norm), r.param(a.kv_norm), r.param(a.attn_sink);
  r.device += uint64_t(cfg.rope_dim / 2) * kF32;  // the layer's RoPE inverse frequencies
  if (a.compressor) r.compressor(*a.compressor);
  if (a.indexer) r.linear(a.indexer->wq_b), r.linear(a.indexer->weights_proj, true), r.compressor(a.indexer->compressor);
  const MoeWeights& m = b.ffn;
  r.linear(m.gate, true), r.param(m.bias), r.param(m.tid2eid, kI32);
  r.linear(m.shared.w1), r.linear(m.shared.w2), r.linear(m.shared.w3);
  inv.replicated += r.device;
  inv.stored += r.stored;
  std::vector<uint64_t> row;
  for (const ExpertWeights& e : m.experts) {
    Bytes x;
    x.linear(e.w1), x.linear(e.w2), x.linear(e.w3);
    row.push_back(x.device);
    inv.stored += x.stored;
  }
  inv.experts.push_back(std::move(row));
}

// ---- KV and workspace.

int64_t max_entries(const LayerSpec& l, int64_t context) { return l.attn == AttnKind::Sliding ? 0 : context / l.ratio; }

void check_options(const ModelConfig& cfg, const MemoryPlanOptions& o) {
  if (o.gpus < 1) fail("--gpus: expected at least 1, got ", o.gpus);
  if (cfg.n_routed_experts > 0 && o.gpus > cfg.n_routed_experts)
    fail("--gpus ", o.gpus, ": the model has ", cfg.n_routed_experts,
         " routed experts per layer; expert parallelism needs at most one GPU per expert");
  if (o.context < 1) fail("memory plan: the context must be at least 1 position, got ", o.context);
  if (o.sequences < 1) fail("memory plan: the number of sequences must be at least 1, got ", o.sequences);
  if (o.max_tokens < 1) fail("memory plan: max_tokens must be at least 1, got ", o.max_tokens);
}

}  // namespace

WeightInventory weight_inventory(const ModelConfig& cfg, const Weights& w, bool fast_tier) {
  WeightInventory inv;
  Bytes root;
  root.param(w.embed, kBf16);
  root.linear(w.head, true);
  root.param(w.norm);
  root.hc(w.hc_head);
  for (const BlockWeights& b : w.layers) add_block(cfg, b, inv, fast_tier);
  for (const MtpWeights& m : w.mtp) {
    add_block(cfg, m.block, inv, fast_tier);
    root.linear(m.e_proj), root.linear(m.h_proj);
    root.param(m.enorm), root.param(m.hnorm), root.param(m.norm), root.hc(m.hc_head);
  }
  for (const DSparkWeights& s : w.dspark) {
    add_block(cfg, s.block, inv, fast_tier);
    root.linear(s.main_proj), root.param(s.main_norm), root.param(s.norm), root.hc(s.hc_head);
    root.linear(s.markov_w1), root.linear(s.markov_w2), root.param(s.confidence);
  }
  inv.replicated += root.device;
  inv.stored += root.stored;
  inv.mtp_blocks = int64_t(w.mtp.size());
  return inv;
}

WeightInventory published_weight_inventory(const ModelConfig& cfg, bool fast_tier) {
  return weight_inventory(cfg, published_weights(cfg), fast_tier);
}

const GpuPlan& MemoryPlan::largest() const {
  return *std::max_element(gpus.begin(), gpus.end(),
                           [](const GpuPlan& a, const GpuPlan& b) { return a.total() < b.total(); });
}

uint64_t kv_bytes(const ModelConfig& cfg, int64_t seqs, int64_t context, int64_t max_tokens, int64_t mtp_blocks) {
  const uint64_t S = uint64_t(seqs), d = uint64_t(cfg.head_dim), dI = uint64_t(cfg.index_head_dim);
  const uint64_t W = uint64_t(cfg.sliding_window);
  // The pool holds compact records (io/kv_size.h); bf16 rows where the records do not take the widths
  // (the GPU's official numerics need them anyway).
  KvBytes rec;
  try {
    rec = dsv4::kv_bytes(cfg, KvStorage::Compact);
  } catch (const Error&) {
    rec = dsv4::kv_bytes(cfg, KvStorage::Bf16);
  }
  const uint64_t entry = uint64_t(rec.entry_bytes), key = uint64_t(rec.index_key_bytes);
  uint64_t total = 0;
  std::vector<LayerSpec> specs = cfg.layers;
  for (int64_t k = 0; k < mtp_blocks; ++k) specs.push_back(cfg.layer_at(cfg.num_layers + k));
  for (const LayerSpec& l : specs) {
    const uint64_t E = uint64_t(max_entries(l, context)), m = uint64_t(l.ratio);
    total += (S * W + round16(uint64_t(max_tokens))) * d * kBf16 + S * E * entry;  // ring | chunk, pool
    if (l.attn != AttnKind::Sliding) {
      const uint64_t c = l.attn == AttnKind::CSA ? 2 : 1;
      total += 2 * S * m * c * d * kF32;                                // cur_a, cur_g
      if (c == 2) total += 2 * S * m * d * kF32;                        // prev_a, prev_g
    }
    if (l.attn == AttnKind::CSA)
      total += 2 * S * m * 2 * dI * kF32 + 2 * S * m * dI * kF32 + S * E * key;  // indexer state + keys
  }
  return total;
}

uint64_t workspace_bytes(const ModelConfig& cfg, int gpus, int64_t seqs, int64_t context, int64_t max_tokens,
                         bool mtp) {
  const uint64_t T = uint64_t(std::max(max_tokens, seqs)), P = round16(T);
  const uint64_t D = uint64_t(cfg.hidden_size), H = uint64_t(cfg.num_heads), d = uint64_t(cfg.head_dim);
  const uint64_t qr = uint64_t(cfg.q_lora_rank), G = uint64_t(cfg.o_groups), ro = uint64_t(cfg.o_lora_rank);
  const uint64_t HI = uint64_t(cfg.index_n_heads), dI = uint64_t(cfg.index_head_dim), n = uint64_t(cfg.hc_mult);
  const uint64_t V = uint64_t(cfg.vocab_size), E = uint64_t(cfg.n_routed_experts);
  const uint64_t I = uint64_t(cfg.moe_inter_dim), Tk = T * uint64_t(cfg.experts_per_tok);
  // Attention (AttentionWorkspace).
  bool any_csa = false, any_compressed = false;
  uint64_t keys = 0, entries = 0;
  std::vector<LayerSpec> specs = cfg.layers;  // as AttentionWorkspace: the MTP blocks the config describes too
  for (size_t k = 0; k < cfg.mtp_layers.size(); ++k) specs.push_back(cfg.layer_at(cfg.num_layers + int64_t(k)));
  for (const LayerSpec& l : specs) {
    const uint64_t e = uint64_t(max_entries(l, context));
    keys = std::max(keys, uint64_t(cfg.sliding_window) + (l.attn == AttnKind::CSA ? uint64_t(cfg.index_topk) : e));
    if (l.attn == AttnKind::CSA) any_csa = true, entries = std::max(entries, e);
    if (l.attn != AttnKind::Sliding) any_compressed = true;
  }
  const uint64_t max_in = std::max({D, qr, G * ro});
  uint64_t s = P * max_in + ceil_div(max_in, 128) * P * kF32;
  s += (P * qr + P * H * d + T * H * d + P * G * ro + P * D) * kBf16;
  // The compressors' scratch, one set each (head_dim for the main one, index_head_dim for the indexer's).
  auto compressor = [&](uint64_t dc) { return 2 * T * 2 * dc * kF32 + T * dc * kBf16; };
  if (any_compressed) s += compressor(d);
  s += T * keys * kI32 + std::min<uint64_t>(T, 16) * H * kI32;  // key lists, the split attention's tickets
  if (any_csa) {
    s += compressor(dI) + P * qr + ceil_div(qr, 128) * P * kF32;  // and the indexer's own codes of the latent
    s += (P * HI * dI + T * HI) * kBf16 + T * std::max<uint64_t>(entries, 1) * kF32 + T * uint64_t(cfg.index_topk) * kI32;
  }
  // MoE (MoeWorkspace of rows tokens with k picks over e experts).
  auto moe_ws = [&](uint64_t rows, uint64_t k, uint64_t e) {
    const uint64_t Pr = round16(rows), Rk = rows * k;
    uint64_t m = rows * e * kF32 + 2 * Rk * 4 + Pr * D + Pr * (D / 128) * kF32 + Rk * D + Rk * (D / 128) * kF32;
    m += (Rk * 2 * I + Rk * I + Rk * D) * kBf16 + Rk * I + Rk * (I / 128) * kF32;
    return m + 3 * Pr * I * kBf16 + Pr * I + Pr * (I / 128) * kF32 + Pr * D * kBf16;
  };
  s += moe_ws(T, uint64_t(cfg.experts_per_tok), E);
  // Residual streams, sub-layer in/out, head (CudaModel): logits in pieces of at most ~256 MiB.
  const uint64_t logit_rows = std::min(T, std::max(uint64_t(seqs), (uint64_t(256) << 20) / std::max<uint64_t>(V * 4, 1)));
  s += (P * n * D + 2 * P * D + logit_rows * D) * kBf16 + logit_rows * V * kF32 + (2 * T * n + T * n * n) * kF32;
  s += logit_rows * ((V + 31) / 32) * 4;  // the sampler's grammar masks (one bit per id and row)
  s += 3 * (uint64_t(64) << 20);  // the context's cuBLASLt workspace and its two lanes' (BackendOptions::overlap)
  // MTP input (MtpWorkspace): streams S [T n, D], e [T, D], ep [P, D], hp [T n + 16, D] bf16, the sum's
  // post / comb constants fp32, and the pinned staging of S (host memory, not counted).
  if (mtp) s += (T * n * D + T * D + P * D + (T * n + 16) * D) * kBf16 + (T * n + T * n * n) * kF32;
  // Expert parallelism (backend/cuda/moe_ranks.h): this GPU's T*k (token, pick) rows out and back
  // (bf16), up to every GPU's rows in and out when they all pick this GPU's experts, and the routed
  // pass over the arrived rows (one pick each, this GPU's experts, in pieces of T*k rows).
  if (gpus > 1) s += 2 * (Tk * D * kBf16) + 2 * (uint64_t(gpus) * Tk * D * kBf16) + moe_ws(Tk, 1, E / uint64_t(gpus));
  return s;
}

namespace {
// wo_a's inputs per group (num_heads * head_dim / o_groups) and the bf16 bytes of one group's rows.
int64_t wo_a_group_inputs(const ModelConfig& cfg) { return cfg.num_heads * cfg.head_dim / std::max<int64_t>(1, cfg.o_groups); }
uint64_t wo_a_group_bytes(const ModelConfig& cfg) { return uint64_t(cfg.o_lora_rank) * uint64_t(wo_a_group_inputs(cfg)) * kBf16; }
}  // namespace

bool wo_a_as_codes(const ModelConfig& cfg, const LinearWeight& wo_a) {
  return wo_a.format == WeightFormat::FP8 && cfg.o_lora_rank % 128 == 0 && wo_a_group_inputs(cfg) % 128 == 0;
}

int64_t wo_a_scratch_groups(const ModelConfig& cfg) {
  const int64_t G = std::max<int64_t>(1, cfg.o_groups);
  int64_t best = 1;
  for (int64_t g = 1; g <= G; ++g)
    if (G % g == 0 && uint64_t(g) * wo_a_group_bytes(cfg) <= kWoaScratchMaxBytes) best = g;
  return best;
}

uint64_t wo_a_scratch_bytes(const ModelConfig& cfg) { return uint64_t(wo_a_scratch_groups(cfg)) * wo_a_group_bytes(cfg); }

MemoryPlan plan_memory(const ModelConfig& cfg, const WeightInventory& w, const MemoryPlanOptions& o) {
  check_options(cfg, o);
  MemoryPlan p;
  p.options = o;
  const int64_t seqs = (o.sequences + o.gpus - 1) / o.gpus;  // data-parallel attention: the same slots on every GPU
  const int64_t T = std::max(o.max_tokens, seqs);  // a decode batch of every slot is one call
  const uint64_t kv = kv_bytes(cfg, seqs, o.context, T, w.mtp_blocks);
  uint64_t ws = workspace_bytes(cfg, o.gpus, seqs, o.context, T, w.mtp_blocks > 0);
  if (w.wo_a_codes) ws += wo_a_scratch_bytes(cfg);  // the fast tier's bf16 rows of wo_a (calls above 32 tokens)
  for (int g = 0; g < o.gpus; ++g) {
    GpuPlan gp;
    gp.gpu = g;
    gp.sequences = seqs;
    gp.weights = w.replicated;
    gp.kv = kv;
    gp.workspace = ws;
    const int64_t E = cfg.n_routed_experts;
    gp.first_expert = g * E / o.gpus;
    gp.experts = (g + 1) * E / o.gpus - gp.first_expert;
    for (const auto& block : w.experts)
      for (int64_t e = gp.first_expert; e < gp.first_expert + gp.experts && e < int64_t(block.size()); ++e)
        gp.weights += block[size_t(e)];
    p.gpus.push_back(gp);
  }
  return p;
}

MemoryPlan check_memory(const ModelConfig& cfg, const WeightInventory& w, const MemoryPlanOptions& o,
                        uint64_t gpu_bytes) {
  MemoryPlan p = plan_memory(cfg, w, o);
  const GpuPlan& g = p.largest();
  if (g.total() <= gpu_bytes) return p;
  std::string hint;
  const int most = int(std::max<int64_t>(cfg.n_routed_experts, 1));
  for (int n = o.gpus + 1; n <= most && hint.empty(); ++n) {
    MemoryPlanOptions more = o;
    more.gpus = n;
    if (plan_memory(cfg, w, more).largest().total() <= gpu_bytes) hint = cat("use --gpus ", n);
  }
  if (hint.empty())
    hint = o.gpus >= most ? "a shorter context or fewer sequences may fit"
                          : cat("no number of GPUs up to ", most, " fits: use a shorter context or fewer sequences");
  char buf[512];
  std::snprintf(buf, sizeof buf,
                "needs %.2f GiB per GPU on %d GPU(s) (weights %.2f, KV %.2f, workspace %.2f), the GPU has %.2f GiB; %s",
                gib(g.total()), o.gpus, gib(g.weights), gib(g.kv), gib(g.workspace), gib(gpu_bytes), hint.c_str());
  throw Error(buf);
}

}  // namespace dsv4
