// CudaBackend (cuda_backend.h): slots, buffers, the call's uploads and CUDA graphs, and the ops over
// the sub-layers of this folder (attention_sublayer.h, moe_sublayer.h, head_layer.h, mtp_layer.h).
#include "backend/cuda/cuda_backend.h"

#include <algorithm>
#include <cstdio>
#include <cstring>

#include "backend/comm/expert_range.h"
#include "backend/cuda/check.h"
#include "backend/cuda/gemm.h"
#include "backend/cuda/gemm_tma.h"
#include "backend/cuda/linear_choice.h"
#include "backend/cuda/ops.h"
#include "backend/cuda/sampling.h"
#include "core/dtype.h"
#include "core/error.h"
#include "io/memory_plan.h"

namespace dsv4::cuda {
namespace {

// The kernel nodes of a captured graph (its launches: ours and cuBLASLt's; copies and event edges are not
// kernels); -1 where the graph cannot be read (a statistic: never an error).
int64_t kernel_nodes(cudaGraph_t graph) {
  size_t n = 0;
  std::vector<cudaGraphNode_t> nodes;
  bool ok = cudaGraphGetNodes(graph, nullptr, &n) == cudaSuccess;
  if (ok && n > 0) {
    nodes.resize(n);
    ok = cudaGraphGetNodes(graph, nodes.data(), &n) == cudaSuccess;
  }
  int64_t kernels = 0;
  for (size_t i = 0; ok && i < n; ++i) {
    cudaGraphNodeType type{};
    ok = cudaGraphNodeGetType(nodes[i], &type) == cudaSuccess;
    kernels += type == cudaGraphNodeTypeKernel;
  }
  if (!ok) cudaGetLastError();
  return ok ? kernels : -1;
}

}  // namespace

CudaBackend::CudaBackend(const ModelConfig& cfg, const Weights& w, uint64_t total_bytes, const BackendOptions& o,
                         const LoadProgress& progress)
    : cfg_(cfg), opt_(o), cap_(o.capacity) {
  if (cap_.max_seqs < 1 || cap_.max_tokens < 1 || cap_.max_ctx < 1)
    fail("cuda backend: slots, context and tokens per call must be positive");
  cap_.max_tokens = std::max(cap_.max_tokens, cap_.max_seqs);  // a decode batch is one call
  const ExpertRange experts = expert_range(cfg_.n_routed_experts, o.comm);  // throws when they do not split
  ctx_ = std::make_unique<DeviceContext>(o.gpu);
  ctx_->set_kernels(o.kernels);
  if (o.overlap) ctx_->add_lanes(kLanes);
  attn_in_ = std::make_unique<StreamMark>();
  q_latent_ = std::make_unique<StreamMark>();
  check_fits(w);
  w_ = upload_weights(*ctx_, cfg_, w, total_bytes, progress, experts);

  const int64_t T = cap_.max_tokens, n = cfg_.hc_mult, D = cfg_.hidden_size, V = cfg_.vocab_size;
  geo_ = kv_page_geometry(cfg_, num_mtp());
  max_pages_ = geo_.pages_for(cap_.max_ctx);
  // Default pool: every slot at max_ctx (the fixed regions' memory before the pool).
  const int64_t pages = cap_.kv_pages > 0 ? cap_.kv_pages : std::max<int64_t>(1, cap_.max_seqs * geo_.pages_needed(cap_.max_ctx));
  pool_ = std::make_shared<PagePool>(pages, geo_.page_tokens);
  const int64_t groups = int64_t(geo_.group_paged.size());
  page_host_.assign(size_t(groups * cap_.max_seqs * max_pages_), -1);
  page_table_ = DeviceBuffer<int32_t>(page_host_);
  tables_.assign(size_t(cap_.max_seqs), std::vector<PageTable>(size_t(groups)));
  fed_.assign(size_t(cap_.max_seqs), std::vector<int64_t>(size_t(groups), 0));
  for (int64_t i = 0; i < cfg_.num_layers + num_mtp(); ++i) {
    states_.emplace_back(cfg_, cfg_.layer_at(i), cap_.max_seqs, cap_.max_ctx, T, pages, geo_.page_tokens);
    AttentionLayerState& st = states_.back();
    st.pages = {.pages = page_table_.get() + geo_.group_of(i) * cap_.max_seqs * max_pages_, .max_pages = max_pages_,
                .per_page = int(st.per_page)};
  }
  bool wo_a_codes = false;  // the fast tier holds some layer's wo_a as FP8 codes (attention_sublayer.h)
  for (int64_t i = 0; i < cfg_.num_layers + num_mtp(); ++i) wo_a_codes |= block(i, "init").attn.wo_a8.codes.get() != nullptr;
  attn_ws_ = std::make_unique<AttentionWorkspace>(cfg_, T, cap_.max_ctx, wo_a_codes);
  moe_ws_ = std::make_unique<MoeWorkspace>(*ctx_, cfg_, T);
  if (num_mtp() > 0) mtp_ws_ = std::make_unique<MtpWorkspace>(cfg_, T);
  moe_ws_->grouped_prefill = o.grouped_moe_prefill;
  if (o.comm) moe_ranks_ = std::make_unique<MoeRanks>(*ctx_, cfg_, *o.comm, T, o.grouped_moe_prefill);
  // Logit rows: every decode row, and prefill logits in pieces of at most ~256 MiB.
  logit_rows_ = std::min(T, std::max<int64_t>(cap_.max_seqs, (int64_t(256) << 20) / (V * 4)));

  ids_ = DeviceBuffer<int32_t>(size_t(T));
  positions_ = DeviceBuffer<int32_t>(size_t(T));
  slots_ = DeviceBuffer<int32_t>(size_t(T));
  DSV4_CUDA_CHECK(cudaMallocHost(reinterpret_cast<void**>(&host_in_), size_t(3 * T) * sizeof(int32_t)));
  const int64_t rows = (T + 15) / 16 * 16;  // GEMM outputs may be padded to a multiple of 16 rows
  X_ = DeviceBuffer<bf16>(size_t(rows * n * D));
  u_ = DeviceBuffer<bf16>(size_t(rows * D));
  y_ = DeviceBuffer<bf16>(size_t(rows * D));
  h_ = DeviceBuffer<bf16>(size_t(logit_rows_ * D));
  pre_ = DeviceBuffer<float>(size_t(T * n));
  post_ = DeviceBuffer<float>(size_t(T * n));
  comb_ = DeviceBuffer<float>(size_t(T * n * n));
  partial_ = DeviceBuffer<float>(mhc_pre_partial_floats(T, int(n), int(D)));
  logits_ = DeviceBuffer<float>(size_t(logit_rows_ * V));
  samp_params_ = DeviceBuffer<uint64_t>(size_t(5 * logit_rows_));
  samp_ids_ = DeviceBuffer<int32_t>(size_t(logit_rows_));
  DSV4_CUDA_CHECK(cudaMallocHost(reinterpret_cast<void**>(&samp_host_), size_t(5 * logit_rows_) * sizeof(uint64_t)));
  DSV4_CUDA_CHECK(cudaMallocHost(reinterpret_cast<void**>(&samp_ids_host_), size_t(logit_rows_) * sizeof(int32_t)));
  samp_params_.fill_bytes(0);
  mask_words_ = (V + 31) / 32;
  samp_mask_ = DeviceBuffer<uint32_t>(size_t(logit_rows_ * mask_words_));
  DSV4_CUDA_CHECK(cudaMallocHost(reinterpret_cast<void**>(&samp_mask_host_),
                                 size_t(logit_rows_ * mask_words_) * sizeof(uint32_t)));
  for (auto* b : {&X_, &u_, &y_, &h_}) b->fill_bytes(0);  // padded GEMM rows stay finite
}

CudaBackend::~CudaBackend() {
  for (auto& [key, g] : graphs_) cudaGraphExecDestroy(g.exec);
  if (host_in_) cudaFreeHost(host_in_);
  if (samp_host_) cudaFreeHost(samp_host_);
  if (samp_ids_host_) cudaFreeHost(samp_ids_host_);
  if (samp_mask_host_) cudaFreeHost(samp_mask_host_);
}

// The memory plan (io/memory_plan.h) of this GPU's share against its free memory, before any weight
// moves: a model or a capacity that cannot fit fails here with one line naming what it needs.
void CudaBackend::check_fits(const Weights& w) const {
  size_t free_b = 0, total_b = 0;
  DSV4_CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
  const int gpus = opt_.comm ? opt_.comm->size() : 1;
  const MemoryPlanOptions plan{.gpus = gpus, .context = cap_.max_ctx, .sequences = cap_.max_seqs,
                               .max_tokens = cap_.max_tokens};
  GpuPlan g;
  try {
    g = check_memory(cfg_, weight_inventory(cfg_, w, opt_.kernels == KernelTier::Fast), plan, uint64_t(free_b)).largest();
  } catch (const Error& e) {
    fail("cuda backend (", ctx_->name(), ", ", cap_.max_seqs, " sequence(s) of ", cap_.max_ctx,
         " positions, calls of ", cap_.max_tokens, " tokens): ", e.what());
  }
  if (opt_.report && (!opt_.comm || opt_.comm->rank() == 0)) {  // one line for a group (every GPU's plan is alike)
    char line[256];
    std::snprintf(line, sizeof line,
                  "memory plan on %s: %.2f GiB (weights %.2f, KV %.2f for %lld sequence(s) of %lld positions, "
                  "workspace %.2f)",
                  gpus == 1 ? "1 GPU" : ("each of " + std::to_string(gpus) + " GPUs").c_str(), gib(g.total()),
                  gib(g.weights), gib(g.kv), (long long)cap_.max_seqs, (long long)cap_.max_ctx,
                  gib(g.workspace));
    opt_.report(line);
  }
}

std::string CudaBackend::name() const { return std::string("cuda (") + kernel_tier_name(opt_.kernels) + " kernels)"; }

BackendInfo CudaBackend::info() const {
  size_t free_b = 0, total_b = 0;
  DSV4_CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
  return BackendInfo{.device = ctx_->name(), .weight_bytes = w_.device_bytes, .free_bytes = uint64_t(free_b)};
}

// ---- a call

void CudaBackend::begin(const Batch& b) {
  const int64_t T = b.size();  // 0: an idle rank of an expert-parallel group (its MoE serves the others)
  if (T < (moe_ranks_ ? 0 : 1) || T > cap_.max_tokens)
    fail("cuda backend: ", T, " tokens in one call, at most ", cap_.max_tokens);
  if (b.slots.size() != b.ids.size() || b.positions.size() != b.ids.size())
    fail("cuda backend: ids, slots and positions differ in length");
  if (b.run_len < 1 || T % b.run_len != 0) fail("cuda backend: ", T, " tokens do not split into runs of ", b.run_len);
  for (int64_t t = 0; t < T; ++t) {
    const int32_t id = b.ids[size_t(t)], s = b.slots[size_t(t)], p = b.positions[size_t(t)];
    if (id < 0 || id >= cfg_.vocab_size) fail("token id ", id, " is outside the vocabulary [0, ", cfg_.vocab_size, ")");
    if (s < 0 || s >= cap_.max_seqs) fail("cuda backend: slot ", s, " outside [0, ", cap_.max_seqs, ")");
    if (p < 0 || p >= cap_.max_ctx) fail("cuda backend: position ", p, " outside the context of ", cap_.max_ctx);
  }
  // The previous call's copies from the pinned buffer must be done before it is overwritten.
  ctx_->synchronize();
  const int64_t M = cap_.max_tokens;
  std::memcpy(host_in_, b.ids.data(), size_t(T) * 4);
  std::memcpy(host_in_ + M, b.positions.data(), size_t(T) * 4);
  std::memcpy(host_in_ + 2 * M, b.slots.data(), size_t(T) * 4);
  const cudaStream_t s = ctx_->stream();
  DSV4_CUDA_CHECK(cudaMemcpyAsync(ids_.get(), host_in_, size_t(T) * 4, cudaMemcpyHostToDevice, s));
  DSV4_CUDA_CHECK(cudaMemcpyAsync(positions_.get(), host_in_ + M, size_t(T) * 4, cudaMemcpyHostToDevice, s));
  DSV4_CUDA_CHECK(cudaMemcpyAsync(slots_.get(), host_in_ + 2 * M, size_t(T) * 4, cudaMemcpyHostToDevice, s));
  T_ = T;
  run_len_ = b.run_len;
  runs_.clear();
  for (int64_t t0 = 0; t0 < T; t0 += b.run_len)
    runs_.push_back({.slot = b.slots[size_t(t0)], .p0 = b.positions[size_t(t0)], .n = b.run_len});
}

void CudaBackend::upload_table(int slot, int64_t group) {
  const size_t row = size_t((group * cap_.max_seqs + slot) * max_pages_);
  const std::vector<int32_t>& pages = tables_[size_t(slot)][size_t(group)].pages;
  std::fill(page_host_.begin() + ptrdiff_t(row), page_host_.begin() + ptrdiff_t(row) + max_pages_, -1);
  std::copy(pages.begin(), pages.end(), page_host_.begin() + ptrdiff_t(row));
  // From pageable memory: the copy is staged before the call returns, in stream order with the kernels.
  DSV4_CUDA_CHECK(cudaMemcpyAsync(page_table_.get() + row, page_host_.data() + row, size_t(max_pages_) * 4,
                                  cudaMemcpyHostToDevice, ctx_->stream()));
}

void CudaBackend::take_pages(int64_t group) {
  if (!geo_.group_paged[size_t(group)]) return;
  for (const HostRun& r : runs_) {
    PageTable& t = tables_[size_t(r.slot)][size_t(group)];
    const size_t had = t.pages.size();
    const int64_t last = (r.p0 + r.n - 1) / geo_.page_tokens;
    fed_[size_t(r.slot)][size_t(group)] = r.p0 + r.n;
    if (r.p0 == 0 && had > 0) {
      // A restart: its pages go back to the pool and fresh ones come (the pool hands the same ones back
      // unless another sequence still holds them). The row goes to the device only if it changed: the
      // copy comes from pageable memory, which synchronizes the host with the stream, and a decode
      // graph replayed at position 0 (dsv4 bench at context 0) would otherwise idle the GPU once per
      // sequence per step (~1 us each: +110 us on the head's time at batch 128, H200 2026-12-06).
      const std::vector<int32_t> before = t.pages;
      t.release_all(*pool_);
      t.ensure(*pool_, last);
      if (t.pages != before) upload_table(r.slot, group);
      continue;
    }
    t.ensure(*pool_, last);
    if (t.pages.size() != had) upload_table(r.slot, group);
  }
}

void CudaBackend::prepare(const StepShape& shape) {
  const int64_t T = shape.tokens;
  if (!prepared_[T]) {
    for (int64_t i = 0; i < cfg_.num_layers + num_mtp(); ++i)
      attn_ws_->prepare(*ctx_, cfg_, block(i, "prepare").attn, T);
    for (const DevMtpWeights& m : w_.mtp) mtp_input_prepare(*ctx_, m, *attn_ws_, T, int(cfg_.hc_mult));
    moe_ws_->prepare(*ctx_, T);
    prepared_[T] = true;
  }
  if (shape.head_rows > 0) head_plan(shape.head_rows);
}

void CudaBackend::execute(const StepShape& shape, const std::function<void()>& body) {
  if (shape.head < 0 || shape.head > num_mtp())
    fail("cuda backend: head ", shape.head, " does not exist (", num_mtp(), " MTP block(s))");
  if (shape.mtp && num_mtp() == 0) fail("cuda backend: an MTP call, the checkpoint has no MTP block");
  if (shape.tokens != T_ || shape.run_len != run_len_)
    fail("cuda backend: a shape of ", shape.tokens, " tokens in runs of ", shape.run_len, " after a batch of ", T_,
         " in runs of ", run_len_);
  stage_sampling();
  take_pages(shape.mtp ? shape.head : 0);  // MTP block k: head 1 + k, layer group 1 + k
  // Decode batches (run_len 1) and speculative verify calls (run_len <= kMaxGraphRunLen: k + 1 tokens of
  // each sequence) are captured; prefill chunks, whose sizes vary call to call, run as launches. Every
  // launch's host-side parameters depend only on shape.key() (positions, slots and page tables live on
  // the device).
  // Expert-parallel calls exchange their counts through the host (moe_ranks.h): no graphs.
  attn_in_layer_ = q_latent_layer_ = -1;  // marks of an earlier call are not this call's points
  const auto run_body = [&] {
    body();
    join_lanes();
  };
  last_graph_kernels_ = -1;
  if (!opt_.graphs || !shape.graph || shape.run_len > kMaxGraphRunLen || moe_ranks_) {
    run_body();
    return;
  }
  auto it = graphs_.find(shape.key());
  if (it == graphs_.end()) {
    prepare(shape);
    const cudaStream_t s = ctx_->stream();
    cudaGraph_t graph = nullptr;
    DSV4_CUDA_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeRelaxed));
    try {
      run_body();
    } catch (...) {
      for (bool& busy : lane_busy_) busy = false;  // the failed capture takes the lanes' work with it
      cudaStreamEndCapture(s, &graph);
      if (graph) cudaGraphDestroy(graph);
      throw;
    }
    DSV4_CUDA_CHECK(cudaStreamEndCapture(s, &graph));
    const int64_t kernels = kernel_nodes(graph);
    cudaGraphExec_t exec = nullptr;
    const cudaError_t e = cudaGraphInstantiate(&exec, graph, 0);
    cudaGraphDestroy(graph);
    DSV4_CUDA_CHECK(e);
    it = graphs_.emplace(shape.key(), Graph{.exec = exec, .kernels = kernels}).first;
  }
  DSV4_CUDA_CHECK(cudaGraphLaunch(it->second.exec, ctx_->stream()));
  last_graph_kernels_ = it->second.kernels;
}

void CudaBackend::set_sampling(const std::vector<SampleRow>& rows) {
  const int64_t n = int64_t(rows.size());
  if (n < 1 || n > logit_rows_) fail("cuda backend: ", n, " sampled rows outside [1, ", logit_rows_, "]");
  samp_pending_ = rows;
}

void CudaBackend::stage_sampling() {
  if (samp_pending_.empty()) return;
  // The pinned buffer is free: begin() waited for the previous call's copies.
  const int64_t R = logit_rows_, n = int64_t(samp_pending_.size());
  uint64_t* seed = samp_host_;
  uint64_t* step = samp_host_ + R;
  float* temp = reinterpret_cast<float*>(samp_host_ + 2 * R);
  float* top_p = temp + R;
  float* min_p = top_p + R;
  int32_t* top_k = reinterpret_cast<int32_t*>(min_p + R);
  int32_t* masked = top_k + R;
  const size_t W = size_t(mask_words_);
  for (int64_t b = 0; b < R; ++b) masked[b] = 0;
  for (int64_t b = 0; b < n; ++b) {
    const SampleRow& r = samp_pending_[size_t(b)];
    seed[b] = r.seed;
    step[b] = r.step;
    temp[b] = r.temperature;
    top_p[b] = r.top_p;
    min_p[b] = r.min_p;
    top_k[b] = r.top_k;
    masked[b] = r.mask != nullptr;
  }
  DSV4_CUDA_CHECK(cudaMemcpyAsync(samp_params_.get(), samp_host_, size_t(5 * R) * sizeof(uint64_t),
                                  cudaMemcpyHostToDevice, ctx_->stream()));
  // Only the grammar rows' masks travel (a row without one costs nothing here).
  for (int64_t b = 0; b < n; ++b)
    if (const uint32_t* m = samp_pending_[size_t(b)].mask) {
      uint32_t* h = samp_mask_host_ + size_t(b) * W;
      std::memcpy(h, m, W * sizeof(uint32_t));
      DSV4_CUDA_CHECK(cudaMemcpyAsync(samp_mask_.get() + size_t(b) * W, h, W * sizeof(uint32_t),
                                      cudaMemcpyHostToDevice, ctx_->stream()));
    }
  samp_pending_.clear();
}

// ---- the ops

const DevBlockWeights& CudaBackend::block(int64_t layer, const char* op) const {
  const int64_t L = int64_t(w_.layers.size());
  if (layer < 0 || layer >= L + num_mtp())
    fail("cuda backend: ", op, " of layer ", layer, ", the model has ", L, " layers and ", num_mtp(), " MTP block(s)");
  return layer < L ? w_.layers[size_t(layer)] : w_.mtp[size_t(layer - L)].block;
}

DevHeadWeights CudaBackend::head_weights(int64_t head) const {
  if (head < 0 || head > num_mtp()) fail("head ", head, " does not exist (", num_mtp(), " MTP block(s))");
  if (head == 0) return head_view(w_.hc_head, w_.norm, w_.head, cfg_);
  const DevMtpWeights& m = w_.mtp[size_t(head - 1)];
  return head_view(m.hc_head, m.norm, w_.head, cfg_);  // the main head's weight (MODEL.md §8)
}

AttentionCall CudaBackend::attention(int64_t layer, const char* op) {
  const DevBlockWeights& b = block(layer, op);
  return {.cfg = cfg_, .w = b.attn, .st = states_[size_t(layer)], .ws = *attn_ws_,
          .b = {.tokens = T_, .run_len = run_len_, .positions = positions_.get(), .slots = slots_.get()}};
}

const DeviceContext* CudaBackend::on_lane(int i, int64_t layer) {
  if (!lanes_on()) return nullptr;
  const DeviceContext& lane = ctx_->lane(i);
  if (!lane_busy_[i]) {
    if (attn_in_layer_ == layer) lane.wait(*attn_in_);
    else ctx_->fork(lane);  // no mark of this layer's input: after everything queued so far
    lane_busy_[i] = true;
  }
  return &lane;
}

void CudaBackend::join_lanes() {
  for (int i = 0; i < kLanes; ++i)
    if (lane_busy_[i]) {
      ctx_->join(ctx_->lane(i));
      lane_busy_[i] = false;
    }
}

void CudaBackend::embed() {
  join_lanes();
  if (T_ == 0) return;  // an idle rank
  embed_forward(*ctx_, embed_view(w_.embed, cfg_), ids_.get(), T_, int(cfg_.hc_mult), X_.get());
}

void CudaBackend::mhc(const MhcStep& s) {
  join_lanes();
  if (T_ == 0) return;  // an idle rank
  const int n = int(cfg_.hc_mult), D = int(cfg_.hidden_size);
  const float eps = float(cfg_.rms_norm_eps);
  if (s.post) {
    block(s.post->layer, "mhc post");
    mhc_post(*ctx_, {.X = X_.get(), .y = y_.get(), .post = post_.get(), .comb = comb_.get(), .out = X_.get(),
                     .tokens = T_, .n = n, .D = D});
  }
  if (s.pre) {
    const DevBlockWeights& b = block(s.pre->layer, "mhc pre");
    const bool attn = s.pre->sub == SubLayer::Attention;
    const DevHc& hc = attn ? b.hc_attn : b.hc_ffn;
    mhc_pre(*ctx_, {.X = X_.get(), .fn = hc.fn.get(), .base = hc.base.get(), .scale = hc.scale.get(),
                    .pre = pre_.get(), .post = post_.get(), .comb = comb_.get(), .u = u_.get(),
                    .u_norm = (attn ? b.attn_norm : b.ffn_norm).get(), .partial = partial_.get(), .tokens = T_,
                    .n = n, .D = D, .norm_eps = eps, .hc_eps = float(cfg_.hc_eps),
                    .sinkhorn_iters = int(cfg_.hc_sinkhorn_iters)});
    if (attn) {  // the point this layer's compressors and indexer start from
      attn_in_->record(*ctx_);
      attn_in_layer_ = s.pre->layer;
    }
  }
}

// An idle rank (0 tokens) skips every op but the MoE's exchange.
// The compressors and the indexer run on the lanes (from the layer's attention input), beside the queries;
// attend joins them.
void CudaBackend::attn_qkv(int64_t layer) {
  join_lanes();
  if (T_ == 0) return;
  const AttentionCall a = attention(layer, "attn_qkv");
  attn_q_latent(*ctx_, a, u_.get());
  q_latent_->record(*ctx_);  // the point the indexer's queries start from
  q_latent_layer_ = layer;
  attn_q_heads(*ctx_, a);
}
void CudaBackend::compress(int64_t layer, CompressorKind c) {
  if (T_ == 0) return;
  const AttentionCall a = attention(layer, "compress");
  const DeviceContext* lane = on_lane(c == CompressorKind::Main ? 0 : 1, layer);
  attn_compress(lane ? *lane : *ctx_, a, u_.get(), c);
}
void CudaBackend::index_topk(int64_t layer) {
  if (T_ == 0) return;
  const AttentionCall a = attention(layer, "index_topk");
  const DeviceContext* lane = on_lane(1, layer);
  if (!lane) {
    attn_index_topk(*ctx_, a, u_.get());
    return;
  }
  if (q_latent_layer_ != layer) ctx_->fork(*lane);  // no query latent of this layer: after everything so far
  attn_index_topk(*lane, a, u_.get(), q_latent_layer_ == layer ? q_latent_.get() : nullptr);
}
void CudaBackend::attend(int64_t layer) {
  join_lanes();
  if (T_ > 0) attn_attend(*ctx_, attention(layer, "attend"));
}
void CudaBackend::attn_out(int64_t layer) {
  join_lanes();
  if (T_ > 0) cuda::attn_out(*ctx_, attention(layer, "attn_out"), y_.get());
}

void CudaBackend::moe_route(int64_t layer) {
  join_lanes();
  cuda::moe_route(*ctx_, block(layer, "moe_route").ffn, *moe_ws_, u_.get(), ids_.get(), T_);
}
// The shared expert on lane 0 beside the routed experts (one GPU; expert parallelism keeps one stream).
void CudaBackend::moe_experts(int64_t layer) {
  join_lanes();
  const DevMoeWeights& w = block(layer, "moe_experts").ffn;
  if (moe_ranks_) moe_ranks_->experts(w, *moe_ws_, u_.get(), T_, y_.get());
  else cuda::moe_experts(*ctx_, w, *moe_ws_, u_.get(), T_, y_.get(),
                         lanes_on() ? &ctx_->lane(0) : nullptr);
}

void CudaBackend::mtp_input(int64_t k) {
  join_lanes();
  if (k < 0 || k >= num_mtp()) fail("the checkpoint has ", num_mtp(), " MTP block(s), block ", k, " requested");
  if (T_ == 0) return;  // an idle rank
  mtp_input_forward(*ctx_, w_.mtp[size_t(k)], embed_view(w_.embed, cfg_), *mtp_ws_, *attn_ws_, ids_.get(), T_,
                    float(cfg_.rms_norm_eps), X_.get());
}

void CudaBackend::set_streams(const Tensor& S) {
  if (!mtp_ws_) fail("cuda backend: MTP input streams, the checkpoint has no MTP block");
  if (T_ == 0 && !S.shape.empty() && S.shape[0] == 0) return;  // an idle rank's MTP call: no rows
  mtp_ws_->set_streams(*ctx_, S);
}

LinearKernel CudaBackend::head_kernel(int64_t rows) {
  const LinearKernel k = linear_kernel(LinearSite::Head, rows, opt_.kernels);
  if (k != LinearKernel::GemmTma) return k;
  const GemmTmaParams p{.x = h_.get(), .w = head_weights(0).head, .y = logits_.get(), .tokens = rows,
                        .in = cfg_.hidden_size, .out = cfg_.vocab_size};
  if (!gemm_tma_unsupported(*ctx_, p)) return k;
  return rows <= kHeadGemvMaxRows ? LinearKernel::FastGemv : LinearKernel::Lt;
}

LtMatmul* CudaBackend::head_plan(int64_t rows) {
  if (head_kernel(rows) != LinearKernel::Lt) return nullptr;
  auto& plan = head_plans_[rows];
  if (!plan) {
    plan = std::make_unique<LtMatmul>(*ctx_, GemmKind::Bf16F32Out, cfg_.vocab_size, cfg_.hidden_size, rows);
    // The fastest of cuBLASLt's candidates on the head itself (made before a capture or in an eager call;
    // h_ and logits_ hold logit_rows >= rows rows, overwritten by the real run).
    plan->autotune_bf16(*ctx_, h_.get(), head_weights(0).head, logits_.get());
  }
  return plan.get();
}

void CudaBackend::head(int64_t head, int64_t first, int64_t rows) {
  join_lanes();
  const DevHeadWeights hw = head_weights(head);
  if (rows < 1 || rows > logit_rows_ || first < 0 || first + rows > T_)
    fail("cuda backend: head rows [", first, ", ", first + rows, ") of a call of ", T_, " tokens (at most ",
         logit_rows_, " rows)");
  head_forward(*ctx_, hw, X_.get() + first * cfg_.hc_mult * cfg_.hidden_size, rows, h_.get(), logits_.get(),
               head_kernel(rows), head_plan(rows));
}

void CudaBackend::sample(int64_t rows) {
  join_lanes();
  if (rows < 1 || rows > logit_rows_) fail("cuda backend: ", rows, " sampled rows outside [1, ", logit_rows_, "]");
  const int64_t R = logit_rows_;
  const uint64_t* base = samp_params_.get();
  const float* temperature = reinterpret_cast<const float*>(base + 2 * R);
  const float* top_p = temperature + R;
  const float* min_p = top_p + R;
  sample_tokens(*ctx_, {.logits = logits_.get(), .out = samp_ids_.get(), .temperature = temperature,
                        .top_k = reinterpret_cast<const int32_t*>(min_p + R), .top_p = top_p, .min_p = min_p,
                        .seed = base, .step = base + R,
                        .masked = reinterpret_cast<const int32_t*>(min_p + R) + R, .mask = samp_mask_.get(),
                        .rows = rows, .vocab = cfg_.vocab_size, .logits_stride = cfg_.vocab_size,
                        .mask_stride = mask_words_});
}

// ---- slot state

namespace {

// A slot's device state: the bytes of every layer's pieces (AttentionLayerState::slot_pieces), the
// MTP blocks' after the main layers', in order, then the layers' rows of each partial page (pages after
// the complete ones, per group in order), in one device buffer; the complete pages are shared (a
// reference each). Taken and restored by copies on the backend's stream (no host sync): they land
// between the calls around them.
struct CudaSnapshot final : SlotSnapshot {
  ~CudaSnapshot() override {
    for (PageTable& t : shared) t.release_all(*pool);
  }
  uint64_t bytes() const override { return data.bytes() + uint64_t(shared_pages()) * page_bytes; }
  uint64_t copied_bytes() const override { return data.bytes(); }
  int64_t shared_pages() const override {
    int64_t n = 0;
    for (const PageTable& t : shared) n += int64_t(t.pages.size());
    return n;
  }
  PageList page_list() const override {
    PageList l;
    l.pool = pool.get();
    l.page_bytes = page_bytes;
    for (const PageTable& t : shared) l.ids.insert(l.ids.end(), t.pages.begin(), t.pages.end());
    return l;
  }
  const void* owner = nullptr;  // the backend it belongs to
  std::shared_ptr<PagePool> pool;
  std::vector<PageTable> shared;   // [group] the complete pages
  std::vector<int64_t> partial;    // [group] pages copied after them
  std::vector<int64_t> fed;        // [group]
  uint64_t page_bytes = 0;         // one page over all layers
  DeviceBuffer<uint8_t> data;
};

}  // namespace

std::shared_ptr<const SlotSnapshot> CudaBackend::snapshot(int slot, int64_t pos, int64_t mtp_pos) {
  if (slot < 0 || slot >= cap_.max_seqs) fail("cuda backend: slot ", slot, " outside [0, ", cap_.max_seqs, ")");
  std::vector<AttentionLayerState::Piece> pieces;
  for (AttentionLayerState& st : states_)
    for (const auto& p : st.slot_pieces(slot)) pieces.push_back(p);
  auto s = std::make_shared<CudaSnapshot>();
  s->pos = pos;
  s->mtp_pos = mtp_pos;
  s->owner = this;
  s->pool = pool_;
  s->fed = fed_[size_t(slot)];
  s->page_bytes = page_bytes();
  for (size_t g = 0; g < tables_[size_t(slot)].size(); ++g) {
    const std::vector<int32_t>& pages = tables_[size_t(slot)][g].pages;
    const size_t full = std::min(pages.size(), size_t(s->fed[g] / geo_.page_tokens));
    s->shared.push_back({.pages = std::vector<int32_t>(pages.begin(), pages.begin() + ptrdiff_t(full))});
    for (int32_t p : s->shared.back().pages) pool_->retain(p);
    s->partial.push_back(int64_t(pages.size() - full));
    for (size_t i = full; i < pages.size(); ++i)
      for (int64_t l = 0; l < int64_t(states_.size()); ++l)
        if (geo_.group_of(l) == int64_t(g))
          for (const auto& q : states_[size_t(l)].page_pieces(pages[i])) pieces.push_back(q);
  }
  size_t total = 0;
  for (const auto& p : pieces) total += p.bytes;
  s->data = DeviceBuffer<uint8_t>(total);
  size_t off = 0;
  for (const auto& p : pieces) {
    DSV4_CUDA_CHECK(cudaMemcpyAsync(s->data.get() + off, p.data, p.bytes, cudaMemcpyDeviceToDevice, ctx_->stream()));
    off += p.bytes;
  }
  return s;
}

void CudaBackend::restore(int slot, const SlotSnapshot& s) {
  const auto* c = dynamic_cast<const CudaSnapshot*>(&s);
  if (!c || c->owner != this) fail("cuda backend: a snapshot of another backend cannot be restored here");
  if (slot < 0 || slot >= cap_.max_seqs) fail("cuda backend: slot ", slot, " outside [0, ", cap_.max_seqs, ")");
  // The shared pages get their reference first (the slot may hold them too), then the slot's go back
  // and fresh pages take the partial ones' copies.
  std::vector<PageTable> next = c->shared;
  for (const PageTable& t : next)
    for (int32_t p : t.pages) pool_->retain(p);
  release_pages(slot);
  std::vector<AttentionLayerState::Piece> pieces;
  for (AttentionLayerState& st : states_)
    for (const auto& p : st.slot_pieces(slot)) pieces.push_back(p);
  try {
    for (size_t g = 0; g < next.size(); ++g)
      for (int64_t i = 0; i < c->partial[g]; ++i) {
        next[g].pages.push_back(pool_->alloc());
        for (int64_t l = 0; l < int64_t(states_.size()); ++l)
          if (geo_.group_of(l) == int64_t(g))
            for (const auto& q : states_[size_t(l)].page_pieces(next[g].pages.back())) pieces.push_back(q);
      }
  } catch (...) {  // the pool ran out: the slot holds nothing (its next run must start at position 0)
    for (PageTable& t : next) t.release_all(*pool_);
    for (size_t g = 0; g < tables_[size_t(slot)].size(); ++g) upload_table(slot, int64_t(g));
    throw;
  }
  tables_[size_t(slot)] = std::move(next);
  fed_[size_t(slot)] = c->fed;
  for (size_t g = 0; g < tables_[size_t(slot)].size(); ++g) upload_table(slot, int64_t(g));
  size_t off = 0;
  for (const auto& p : pieces) {
    if (off + p.bytes > c->data.bytes()) fail("cuda backend: the snapshot does not match the slot layout");
    DSV4_CUDA_CHECK(cudaMemcpyAsync(p.data, c->data.get() + off, p.bytes, cudaMemcpyDeviceToDevice, ctx_->stream()));
    off += p.bytes;
  }
}

void CudaBackend::release_pages(int slot) {
  for (PageTable& t : tables_[size_t(slot)]) t.release_all(*pool_);
  std::fill(fed_[size_t(slot)].begin(), fed_[size_t(slot)].end(), 0);
}

void CudaBackend::release(int slot) {
  if (slot < 0 || slot >= cap_.max_seqs) fail("cuda backend: slot ", slot, " outside [0, ", cap_.max_seqs, ")");
  release_pages(slot);
  for (size_t g = 0; g < tables_[size_t(slot)].size(); ++g) upload_table(slot, int64_t(g));
}

// Every layer reserves each page's rows (a page id names the same rows in every layer): one page's
// storage is its records in all of them.
uint64_t CudaBackend::page_bytes() const {
  uint64_t n = 0;
  for (const AttentionLayerState& st : states_)
    n += st.page_bytes();
  return n;
}

KvPageInfo CudaBackend::kv_pages() const {
  return {.page_tokens = geo_.page_tokens, .capacity = pool_->capacity(), .used = pool_->used_pages(),
          .paged_groups = geo_.paged_groups(), .page_bytes = int64_t(page_bytes()), .storage = "compact records"};
}

// ---- outputs

Tensor CudaBackend::logits(int64_t rows) {
  if (rows < 1 || rows > logit_rows_) fail("cuda backend: ", rows, " logit rows outside [1, ", logit_rows_, "]");
  Tensor out({rows, cfg_.vocab_size});
  DSV4_CUDA_CHECK(cudaMemcpyAsync(out.ptr(), logits_.get(), size_t(rows * cfg_.vocab_size) * sizeof(float),
                                  cudaMemcpyDeviceToHost, ctx_->stream()));
  ctx_->synchronize();
  return out;
}

std::vector<int32_t> CudaBackend::sampled(int64_t rows) {
  if (rows < 1 || rows > logit_rows_) fail("cuda backend: ", rows, " sampled rows outside [1, ", logit_rows_, "]");
  DSV4_CUDA_CHECK(cudaMemcpyAsync(samp_ids_host_, samp_ids_.get(), size_t(rows) * sizeof(int32_t),
                                  cudaMemcpyDeviceToHost, ctx_->stream()));
  ctx_->synchronize();
  return std::vector<int32_t>(samp_ids_host_, samp_ids_host_ + rows);
}

namespace {

Tensor download_bf16(const DeviceContext& ctx, const bf16* src, Shape shape) {
  Tensor out(std::move(shape));
  std::vector<uint16_t> raw(out.data.size());
  DSV4_CUDA_CHECK(cudaMemcpyAsync(raw.data(), src, raw.size() * 2, cudaMemcpyDeviceToHost, ctx.stream()));
  ctx.synchronize();
  for (size_t i = 0; i < raw.size(); ++i) out.data[i] = bf16_to_f32(raw[i]);
  return out;
}

}  // namespace

Tensor CudaBackend::streams() { return download_bf16(*ctx_, X_.get(), {T_, cfg_.hc_mult, cfg_.hidden_size}); }

Tensor CudaBackend::head_hidden(int64_t head, int64_t first, int64_t rows) {
  const DevHeadWeights hw = head_weights(head);
  const int64_t n = cfg_.hc_mult, D = cfg_.hidden_size;
  if (rows < 1 || first < 0 || first + rows > T_)
    fail("cuda backend: head rows [", first, ", ", first + rows, ") of a call of ", T_, " tokens");
  Tensor out({rows, D});
  for (int64_t r0 = 0; r0 < rows; r0 += logit_rows_) {
    const int64_t piece = std::min(logit_rows_, rows - r0);
    head_hidden_forward(*ctx_, hw, X_.get() + (first + r0) * n * D, piece, h_.get());
    const Tensor part = download_bf16(*ctx_, h_.get(), {piece, D});
    std::copy(part.data.begin(), part.data.end(), out.row(r0));
  }
  return out;
}

double CudaBackend::time_ms(int64_t warmup, int64_t reps, const std::function<void()>& fn) {
  if (reps < 1) fail("time_ms: at least one repetition");
  for (int64_t i = 0; i < warmup; ++i) fn();
  std::vector<cudaEvent_t> ev(size_t(2 * reps), nullptr);
  for (auto& e : ev) DSV4_CUDA_CHECK(cudaEventCreate(&e));
  for (int64_t i = 0; i < reps; ++i) {
    DSV4_CUDA_CHECK(cudaEventRecord(ev[size_t(2 * i)], ctx_->stream()));
    fn();
    DSV4_CUDA_CHECK(cudaEventRecord(ev[size_t(2 * i + 1)], ctx_->stream()));
  }
  ctx_->synchronize();
  std::vector<double> ms;
  cudaError_t err = cudaSuccess;
  for (int64_t i = 0; i < reps && err == cudaSuccess; ++i) {
    float t = 0;
    err = cudaEventElapsedTime(&t, ev[size_t(2 * i)], ev[size_t(2 * i + 1)]);
    ms.push_back(double(t));
  }
  for (auto& e : ev) cudaEventDestroy(e);
  DSV4_CUDA_CHECK(err);
  std::nth_element(ms.begin(), ms.begin() + ptrdiff_t(ms.size() / 2), ms.end());
  return ms[ms.size() / 2];
}

}  // namespace dsv4::cuda
