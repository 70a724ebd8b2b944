#include "model_cuda/cuda_model.h"

#include <algorithm>
#include <cstring>

#include "backend/cuda/check.h"
#include "backend/cuda/gemm.h"
#include "backend/cuda/ops.h"
#include "backend/cuda/sampling.h"
#include "core/dtype.h"
#include "core/error.h"
#include "io/safetensors.h"
#include "model_cuda/dummy_weights.h"

namespace dsv4::cuda {

std::unique_ptr<CudaModel> CudaModel::load(const std::string& dir, const CudaModelOptions& o,
                                           const LoadProgress& progress) {
  ModelConfig cfg = load_config(dir);
  auto ckpt = Checkpoint::open(dir);
  const Weights w = bind_weights(cfg, *ckpt);
  return std::make_unique<CudaModel>(std::move(cfg), w, ckpt->total_bytes(), o, progress);
}

std::unique_ptr<CudaModel> CudaModel::dummy(const ModelConfig& cfg, const CudaModelOptions& o, uint64_t seed,
                                            const LoadProgress& progress) {
  DummyWeights d(cfg, seed);
  return std::make_unique<CudaModel>(cfg, d.weights(), d.total_bytes(), o, progress);
}

CudaModel::CudaModel(ModelConfig cfg, const Weights& w, uint64_t total_bytes, const CudaModelOptions& o,
                     const LoadProgress& progress)
    : cfg_(std::move(cfg)), opt_(o) {
  if (opt_.max_seqs < 1 || opt_.max_tokens < 1 || opt_.max_ctx < 1)
    fail("CudaModel: max_seqs, max_tokens and max_ctx must be positive");
  opt_.max_tokens = std::max(opt_.max_tokens, opt_.max_seqs);  // a decode batch is one call
  ctx_ = std::make_unique<DeviceContext>(opt_.device);
  ctx_->set_kernels(opt_.kernels);
  w_ = upload_weights(*ctx_, cfg_, w, total_bytes, progress);

  const int64_t T = opt_.max_tokens, n = cfg_.hc_mult, D = cfg_.hidden_size, V = cfg_.vocab_size;
  for (int64_t i = 0; i < cfg_.num_layers; ++i)
    states_.emplace_back(cfg_, cfg_.layers[size_t(i)], opt_.max_seqs, opt_.max_ctx, T);
  attn_ws_ = std::make_unique<AttentionWorkspace>(cfg_, T, opt_.max_ctx);
  moe_ws_ = std::make_unique<MoeWorkspace>(*ctx_, cfg_, T);
  moe_ws_->grouped_prefill = o.grouped_moe_prefill;
  // Logit rows: every decode row, and prefill logits in pieces of at most ~256 MiB.
  logit_rows_ = std::min(T, std::max<int64_t>(opt_.max_seqs, (int64_t(256) << 20) / (V * 4)));

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
  greedy_ids_ = DeviceBuffer<int32_t>(size_t(logit_rows_));
  greedy_temp_ = DeviceBuffer<float>(size_t(logit_rows_));
  greedy_seed_ = DeviceBuffer<uint64_t>(size_t(logit_rows_));
  samp_params_ = DeviceBuffer<uint64_t>(size_t(4 * logit_rows_));
  samp_ids_ = DeviceBuffer<int32_t>(size_t(logit_rows_));
  DSV4_CUDA_CHECK(cudaMallocHost(reinterpret_cast<void**>(&samp_host_), size_t(4 * logit_rows_) * sizeof(uint64_t)));
  DSV4_CUDA_CHECK(cudaMallocHost(reinterpret_cast<void**>(&samp_ids_host_), size_t(logit_rows_) * sizeof(int32_t)));
  samp_params_.fill_bytes(0);
  for (auto* b : {&X_, &u_, &y_, &h_}) b->fill_bytes(0);  // padded GEMM rows stay finite
  greedy_temp_.fill_bytes(0);
  greedy_seed_.fill_bytes(0);
}

CudaModel::~CudaModel() {
  for (auto& [key, g] : graphs_) cudaGraphExecDestroy(g);
  if (host_in_) cudaFreeHost(host_in_);
  if (samp_host_) cudaFreeHost(samp_host_);
  if (samp_ids_host_) cudaFreeHost(samp_ids_host_);
}

void CudaModel::upload_inputs(const std::vector<int32_t>& ids, const std::vector<int32_t>& slots,
                              const std::vector<int32_t>& positions) {
  const int64_t T = int64_t(ids.size());
  if (T < 1 || T > opt_.max_tokens) fail("CudaModel: ", T, " tokens in one call, at most ", opt_.max_tokens);
  if (slots.size() != ids.size() || positions.size() != ids.size())
    fail("CudaModel: ids, slots and positions differ in length");
  for (int64_t t = 0; t < T; ++t) {
    const int32_t id = ids[size_t(t)], s = slots[size_t(t)], p = positions[size_t(t)];
    if (id < 0 || id >= cfg_.vocab_size) fail("token id ", id, " is outside the vocabulary [0, ", cfg_.vocab_size, ")");
    if (s < 0 || s >= opt_.max_seqs) fail("CudaModel: slot ", s, " outside [0, ", opt_.max_seqs, ")");
    if (p < 0 || p >= opt_.max_ctx) fail("CudaModel: position ", p, " outside the context of ", opt_.max_ctx);
  }
  // The previous step's copies from the pinned buffer must be done before it is overwritten.
  ctx_->synchronize();
  std::memcpy(host_in_, ids.data(), size_t(T) * 4);
  std::memcpy(host_in_ + opt_.max_tokens, positions.data(), size_t(T) * 4);
  std::memcpy(host_in_ + 2 * opt_.max_tokens, slots.data(), size_t(T) * 4);
  const cudaStream_t s = ctx_->stream();
  DSV4_CUDA_CHECK(cudaMemcpyAsync(ids_.get(), host_in_, size_t(T) * 4, cudaMemcpyHostToDevice, s));
  DSV4_CUDA_CHECK(cudaMemcpyAsync(positions_.get(), host_in_ + opt_.max_tokens, size_t(T) * 4, cudaMemcpyHostToDevice, s));
  DSV4_CUDA_CHECK(cudaMemcpyAsync(slots_.get(), host_in_ + 2 * opt_.max_tokens, size_t(T) * 4, cudaMemcpyHostToDevice, s));
}

void CudaModel::body(int64_t T, int64_t run_len, int64_t layers, int64_t head_first, int64_t head_rows) {
  const DeviceContext& ctx = *ctx_;
  const int n = int(cfg_.hc_mult), D = int(cfg_.hidden_size);
  const float eps = float(cfg_.rms_norm_eps);
  embed_forward(ctx, w_.embed, ids_.get(), T, n, X_.get());

  auto sublayer = [&](const DevHc& hc, const DeviceBuffer<float>& norm, auto&& f) {
    MhcPreParams p;
    p.X = X_.get();
    p.fn = hc.fn.get();
    p.base = hc.base.get();
    p.scale = hc.scale.get();
    p.pre = pre_.get();
    p.post = post_.get();
    p.comb = comb_.get();
    p.u = u_.get();
    p.partial = partial_.get();
    p.tokens = T;
    p.n = n;
    p.D = D;
    p.norm_eps = eps;
    p.hc_eps = float(cfg_.hc_eps);
    p.sinkhorn_iters = int(cfg_.hc_sinkhorn_iters);
    mhc_pre(ctx, p);
    rms_norm_rows(ctx, u_.get(), norm.get(), T, D, eps);
    f(u_.get(), y_.get());
    MhcPostParams q;
    q.X = X_.get();
    q.y = y_.get();
    q.post = post_.get();
    q.comb = comb_.get();
    q.out = X_.get();
    q.tokens = T;
    q.n = n;
    q.D = D;
    mhc_post(ctx, q);
  };

  AttentionBatch batch;
  batch.tokens = T;
  batch.run_len = run_len;
  batch.positions = positions_.get();
  batch.slots = slots_.get();
  const int64_t L = layers < 0 ? cfg_.num_layers : std::min(layers, cfg_.num_layers);
  for (int64_t i = 0; i < L; ++i) {
    DevBlockWeights& b = w_.layers[size_t(i)];
    sublayer(b.hc_attn, b.attn_norm, [&](const bf16* x, bf16* y) {
      attention_forward(ctx, cfg_, b.attn, states_[size_t(i)], *attn_ws_, batch, x, y);
    });
    sublayer(b.hc_ffn, b.ffn_norm, [&](const bf16* x, bf16* y) { moe_forward(ctx, b.ffn, *moe_ws_, x, ids_.get(), T, y); });
  }
  if (head_rows > 0)
    head_forward(ctx, w_.head, X_.get() + head_first * n * D, head_rows, h_.get(), logits_.get(), head_plan(head_rows));
}

void CudaModel::prepare(int64_t T) {
  if (prepared_[T]) return;
  for (int64_t i = 0; i < cfg_.num_layers; ++i) attn_ws_->prepare(*ctx_, cfg_, w_.layers[size_t(i)].attn, T);
  moe_ws_->prepare(*ctx_, T);
  head_plan(T);
  prepared_[T] = true;
}

LtMatmul* CudaModel::head_plan(int64_t rows) {
  // H200, 2026-12-01 (docs/perf-log.md): the head through fast_gemv takes 268-284 us up to 16 rows,
  // 392 at 32; cuBLASLt 271 / 293 / 293 us at 32 / 64 / 128 rows.
  constexpr int64_t kHeadGemvMaxRows = 16;
  if (opt_.kernels != KernelTier::Fast || rows <= kHeadGemvMaxRows) return nullptr;  // fast_gemv / exact_linear
  auto& plan = head_plans_[rows];
  if (!plan) plan = std::make_unique<LtMatmul>(*ctx_, GemmKind::Bf16F32Out, cfg_.vocab_size, cfg_.hidden_size, rows);
  return plan.get();
}

Tensor CudaModel::download_logits(int64_t rows) {
  Tensor out({rows, cfg_.vocab_size});
  DSV4_CUDA_CHECK(cudaMemcpyAsync(out.ptr(), logits_.get(), size_t(rows * cfg_.vocab_size) * sizeof(float),
                                  cudaMemcpyDeviceToHost, ctx_->stream()));
  ctx_->synchronize();
  return out;
}

Tensor CudaModel::streams(int64_t T) {
  const int64_t n = cfg_.hc_mult, D = cfg_.hidden_size;
  std::vector<uint16_t> raw(size_t(T * n * D));
  DSV4_CUDA_CHECK(cudaMemcpyAsync(raw.data(), X_.get(), raw.size() * 2, cudaMemcpyDeviceToHost, ctx_->stream()));
  ctx_->synchronize();
  Tensor out({T, n, D});
  for (size_t i = 0; i < raw.size(); ++i) out.data[i] = bf16_to_f32(raw[i]);
  return out;
}

void CudaModel::forward_async(int slot, int64_t pos, const std::vector<int32_t>& tokens, int64_t layers) {
  const int64_t T = int64_t(tokens.size());
  std::vector<int32_t> positions(static_cast<size_t>(T)), slots(static_cast<size_t>(T), slot);
  for (int64_t t = 0; t < T; ++t) positions[size_t(t)] = int32_t(pos + t);
  upload_inputs(tokens, slots, positions);
  body(T, T, layers, T - 1, 1);
}

Tensor CudaModel::forward(int slot, int64_t pos, const std::vector<int32_t>& tokens, bool all_logits) {
  const int64_t T = int64_t(tokens.size());
  if (!all_logits) {
    forward_async(slot, pos, tokens);
    return download_logits(1);
  }
  std::vector<int32_t> positions(static_cast<size_t>(T)), slots(static_cast<size_t>(T), slot);
  for (int64_t t = 0; t < T; ++t) positions[size_t(t)] = int32_t(pos + t);
  upload_inputs(tokens, slots, positions);
  body(T, T, -1, 0, 0);
  Tensor out({T, cfg_.vocab_size});
  for (int64_t r0 = 0; r0 < T; r0 += logit_rows_) {
    const int64_t rows = std::min(logit_rows_, T - r0);
    head_forward(*ctx_, w_.head, X_.get() + r0 * cfg_.hc_mult * cfg_.hidden_size, rows, h_.get(), logits_.get(),
                 head_plan(rows));
    Tensor part = download_logits(rows);
    std::copy(part.data.begin(), part.data.end(), out.row(r0));
  }
  return out;
}

void CudaModel::replay(int64_t B, int64_t layers, bool sample) {
  if (B < 1 || B > logit_rows_) fail("CudaModel: decode batch ", B, " outside [1, ", logit_rows_, "]");
  if (!opt_.graphs) {
    body(B, 1, layers, 0, B);
    if (sample) launch_sampling(B);
    return;
  }
  const auto key = std::make_tuple(B, layers, sample);
  auto it = graphs_.find(key);
  if (it == graphs_.end()) {
    prepare(B);
    const cudaStream_t s = ctx_->stream();
    cudaGraph_t graph = nullptr;
    DSV4_CUDA_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeRelaxed));
    try {
      body(B, 1, layers, 0, B);
      if (sample) launch_sampling(B);
    } catch (...) {
      cudaStreamEndCapture(s, &graph);
      if (graph) cudaGraphDestroy(graph);
      throw;
    }
    DSV4_CUDA_CHECK(cudaStreamEndCapture(s, &graph));
    cudaGraphExec_t exec = nullptr;
    const cudaError_t e = cudaGraphInstantiate(&exec, graph, 0);
    cudaGraphDestroy(graph);
    DSV4_CUDA_CHECK(e);
    it = graphs_.emplace(key, exec).first;
  }
  DSV4_CUDA_CHECK(cudaGraphLaunch(it->second, ctx_->stream()));
}

void CudaModel::decode_async(const std::vector<int32_t>& ids, const std::vector<int32_t>& slots,
                             const std::vector<int32_t>& positions) {
  upload_inputs(ids, slots, positions);
  replay(int64_t(ids.size()));
}

Tensor CudaModel::decode_step(const std::vector<int32_t>& ids, const std::vector<int32_t>& slots,
                              const std::vector<int32_t>& positions) {
  decode_async(ids, slots, positions);
  return download_logits(int64_t(ids.size()));
}

void CudaModel::upload_sampling(const std::vector<SampleRow>& rows) {
  const int64_t R = logit_rows_, n = int64_t(rows.size());
  if (n < 1 || n > R) fail("CudaModel: ", n, " sampled rows outside [1, ", R, "]");
  uint64_t* seed = samp_host_;
  uint64_t* step = samp_host_ + R;
  float* temp = reinterpret_cast<float*>(samp_host_ + 2 * R);
  float* top_p = temp + R;
  float* min_p = top_p + R;
  int32_t* top_k = reinterpret_cast<int32_t*>(min_p + R);
  for (int64_t b = 0; b < n; ++b) {
    const SampleRow& r = rows[size_t(b)];
    seed[b] = r.seed;
    step[b] = r.step;
    temp[b] = r.temperature;
    top_p[b] = r.top_p;
    min_p[b] = r.min_p;
    top_k[b] = r.top_k;
  }
  DSV4_CUDA_CHECK(cudaMemcpyAsync(samp_params_.get(), samp_host_, size_t(4 * R) * sizeof(uint64_t),
                                  cudaMemcpyHostToDevice, ctx_->stream()));
}

void CudaModel::launch_sampling(int64_t rows) {
  const int64_t R = logit_rows_;
  uint64_t* base = samp_params_.get();
  SampleParams p;
  p.logits = logits_.get();
  p.out = samp_ids_.get();
  p.seed = base;
  p.step = base + R;
  p.temperature = reinterpret_cast<const float*>(base + 2 * R);
  p.top_p = p.temperature + R;
  p.min_p = p.top_p + R;
  p.top_k = reinterpret_cast<const int32_t*>(p.min_p + R);
  p.rows = rows;
  p.vocab = cfg_.vocab_size;
  p.logits_stride = cfg_.vocab_size;
  sample_tokens(*ctx_, p);
}

std::vector<int32_t> CudaModel::download_sampled(int64_t rows) {
  DSV4_CUDA_CHECK(cudaMemcpyAsync(samp_ids_host_, samp_ids_.get(), size_t(rows) * sizeof(int32_t),
                                  cudaMemcpyDeviceToHost, ctx_->stream()));
  ctx_->synchronize();
  return std::vector<int32_t>(samp_ids_host_, samp_ids_host_ + rows);
}

std::vector<int32_t> CudaModel::decode_sample(const std::vector<int32_t>& ids, const std::vector<int32_t>& slots,
                                              const std::vector<int32_t>& positions,
                                              const std::vector<SampleRow>& rows) {
  if (rows.size() != ids.size()) fail("CudaModel::decode_sample: ", ids.size(), " ids but ", rows.size(), " rows");
  upload_inputs(ids, slots, positions);
  upload_sampling(rows);
  replay(int64_t(ids.size()), -1, true);
  return download_sampled(int64_t(ids.size()));
}

int32_t CudaModel::forward_sample(int slot, int64_t pos, const std::vector<int32_t>& tokens, const SampleRow& row) {
  forward_async(slot, pos, tokens);
  upload_sampling({row});
  launch_sampling(1);
  return download_sampled(1).at(0);
}

Tensor CudaModel::logits_rows(const std::vector<int64_t>& rows) {
  const int64_t V = cfg_.vocab_size;
  Tensor out({int64_t(rows.size()), V});
  for (size_t i = 0; i < rows.size(); ++i) {
    if (rows[i] < 0 || rows[i] >= logit_rows_) fail("CudaModel::logits_rows: row ", rows[i], " outside [0, ", logit_rows_, ")");
    DSV4_CUDA_CHECK(cudaMemcpyAsync(out.row(int64_t(i)), logits_.get() + rows[i] * V, size_t(V) * sizeof(float),
                                    cudaMemcpyDeviceToHost, ctx_->stream()));
  }
  ctx_->synchronize();
  return out;
}

std::vector<int32_t> CudaModel::greedy(int64_t rows) {
  if (rows < 1 || rows > logit_rows_) fail("CudaModel::greedy: ", rows, " rows outside [1, ", logit_rows_, "]");
  SampleParams p;
  p.logits = logits_.get();
  p.out = greedy_ids_.get();
  p.temperature = greedy_temp_.get();
  p.seed = greedy_seed_.get();
  p.step = greedy_seed_.get();
  p.rows = rows;
  p.vocab = cfg_.vocab_size;
  p.logits_stride = cfg_.vocab_size;
  sample_tokens(*ctx_, p);
  std::vector<int32_t> ids(static_cast<size_t>(rows));
  DSV4_CUDA_CHECK(cudaMemcpyAsync(ids.data(), greedy_ids_.get(), size_t(rows) * 4, cudaMemcpyDeviceToHost, ctx_->stream()));
  ctx_->synchronize();
  return ids;
}

}  // namespace dsv4::cuda
