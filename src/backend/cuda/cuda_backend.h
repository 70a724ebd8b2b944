// CudaBackend: the backend interface (backend/backend.h) on one GPU in official numerics (MODEL.md
// §2-§8): weights in device memory (device_weights.h), per-sequence state in device slots (one
// AttentionLayerState per layer), the call's activations in device buffers, and the ops over the
// kernels of this folder. A call: begin() checks and uploads ids / positions / slots (pinned buffer,
// async copies); execute() runs the forward's ops directly, or, for decode and verify shapes (run_len 1 to
// kMaxGraphRunLen, graphs on), captures them once per shape into a CUDA graph (its GEMM plans made before the capture) and
// replays it; outputs are read afterwards (logits, sampled ids, streams).
//
// Positions are the caller's: a sequence in slot s at position p feeds its next tokens at p, p+1, ...;
// a slot restarts a sequence by feeding position 0 (its pages are given back then, nothing else needs a
// reset, see AttentionLayerState). Compressed entries and indexer keys live in the KV page pool
// (docs/kv-pages.md): pages are taken before a call's kernels for the positions it reaches, and the
// kernels read them through the device page table.
// MTP blocks (every mtp.K of the checkpoint): layer num_layers + k through the main layers' ops, with
// its own AttentionLayerState in every slot (snapshots include it), its input by mtp_input
// (mtp_layer.h) from the streams of set_streams, head 1 + k with its own hc_head / norm and the shared
// head weight.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "backend/backend.h"
#include "backend/kv_pages.h"
#include "backend/cuda/buffer.h"
#include "backend/cuda/context.h"
#include "backend/cuda/device_weights.h"
#include "backend/cuda/moe_ranks.h"
#include "backend/cuda/mtp_layer.h"
#include "core/tensor.h"
#include "io/config.h"
#include "io/weights.h"

namespace dsv4::cuda {

// Calls of at most this many tokens per sequence are captured into graphs (decode: 1; a speculative
// verify of k <= 3 drafts: k + 1).
inline constexpr int64_t kMaxGraphRunLen = 4;

// Calls of at most this many tokens use the lanes (BackendOptions::overlap): decode batches, where the
// kernels leave the GPU part idle. Prefill chunks keep one stream: concurrent large GEMMs measured slower
// (H100, 2026-12-06: 1K-token prefill -5% with lanes, batch 1-128 decode -2.5% to -5% step time).
inline constexpr int64_t kLaneMaxTokens = 128;
inline constexpr int kLanes = 2;  // lane 0: the main compressor, the shared expert; lane 1: the indexer

class CudaBackend final : public Backend {
 public:
  CudaBackend(const ModelConfig& cfg, const Weights& w, uint64_t total_bytes, const BackendOptions& o,
              const LoadProgress& progress = {});
  ~CudaBackend() override;
  CudaBackend(const CudaBackend&) = delete;
  CudaBackend& operator=(const CudaBackend&) = delete;

  const ModelConfig& config() const override { return cfg_; }
  const Capacity& capacity() const override { return cap_; }
  Numerics numerics() const override { return Numerics::Official; }
  std::string name() const override;
  int64_t num_mtp() const override { return int64_t(w_.mtp.size()); }
  BackendInfo info() const override;  // the GPU's name, the weights' device bytes, free device memory

  void begin(const Batch& b) override;
  void execute(const StepShape& shape, const std::function<void()>& body) override;
  void set_sampling(const std::vector<SampleRow>& rows) override;

  void embed() override;
  void mhc(const MhcStep& s) override;
  void attn_qkv(int64_t layer) override;
  void compress(int64_t layer, CompressorKind c) override;
  void index_topk(int64_t layer) override;
  void attend(int64_t layer) override;
  void attn_out(int64_t layer) override;
  void moe_route(int64_t layer) override;
  void moe_experts(int64_t layer) override;
  void mtp_input(int64_t k) override;
  void head(int64_t head, int64_t first, int64_t rows) override;
  void sample(int64_t rows) override;

  std::shared_ptr<const SlotSnapshot> snapshot(int slot, int64_t pos, int64_t mtp_pos) override;
  void restore(int slot, const SlotSnapshot& s) override;
  void release(int slot) override;
  KvPageInfo kv_pages() const override;
  uint64_t page_bytes() const;  // one page of the pool over all layers

  int64_t max_logit_rows() const override { return logit_rows_; }
  Tensor logits(int64_t rows) override;
  std::vector<int32_t> sampled(int64_t rows) override;
  Tensor streams() override;
  Tensor head_hidden(int64_t head, int64_t first, int64_t rows) override;
  void set_streams(const Tensor& S) override;
  double time_ms(int64_t warmup, int64_t reps, const std::function<void()>& fn) override;
  int64_t last_graph_kernels() const override { return last_graph_kernels_; }

  // The device state (tests, benchmarks).
  DeviceContext& context() { return *ctx_; }
  const DeviceWeights& weights() const { return w_; }

 private:
  void check_fits(const Weights& w) const;  // the memory plan against the free memory (throws)
  void prepare(const StepShape& shape);  // GEMM plans of a shape (before its capture)
  const DevBlockWeights& block(int64_t layer, const char* op) const;
  DevHeadWeights head_weights(int64_t head) const;  // 0 main, 1 + k MTP block k (a view)
  AttentionCall attention(int64_t layer, const char* op);
  // The fast tier's head GEMM for `rows` rows where the table picks cuBLASLt (else null).
  LtMatmul* head_plan(int64_t rows);
  // The head's kernel at `rows` rows: the table's (linear_choice.h), or where it picks gemm_tma and gemm_tma
  // does not take the shape (a hidden size not a multiple of 64) fast_gemv up to kHeadGemvMaxRows, cuBLASLt above.
  LinearKernel head_kernel(int64_t rows);
  void stage_sampling();  // the rows of set_sampling to the device (outside any capture)
  // Before a call's kernels (outside any capture): the call's runs in `group` restart their tables at
  // position 0 and take the pages their tokens reach; changed table rows go to the device.
  void take_pages(int64_t group);
  void upload_table(int slot, int64_t group);
  void release_pages(int slot);
  // Lanes (BackendOptions::overlap; DeviceContext::add_lanes): 0 runs the main compressor and the shared
  // expert, 1 the indexer's compressor and top-k. on_lane(i, layer): lane i, after the layer's attention
  // input (the mhc pre's mark) where it holds no work yet; null without lanes or above kLaneMaxTokens.
  // join_lanes: the stream waits for every lane holding work (every op but the lanes' own starts with it;
  // execute ends with it).
  bool lanes_on() const { return ctx_->lanes() > 0 && T_ <= kLaneMaxTokens; }  // this call uses them
  const DeviceContext* on_lane(int i, int64_t layer);
  void join_lanes();

  ModelConfig cfg_;
  BackendOptions opt_;
  Capacity cap_;
  std::unique_ptr<DeviceContext> ctx_;
  DeviceWeights w_;
  std::vector<AttentionLayerState> states_;  // the main layers, then the MTP blocks
  // The KV page pool (backend/kv_pages.h): reference counts on the host (snapshots share them), the
  // page tables on the host and, as int32 [groups, max_seqs, max_pages], on the device.
  KvPageGeometry geo_;
  std::shared_ptr<PagePool> pool_;
  int64_t max_pages_ = 0;                       // pages per slot per group: max_ctx's
  DeviceBuffer<int32_t> page_table_;
  std::vector<int32_t> page_host_;              // the device table's copy
  std::vector<std::vector<PageTable>> tables_;  // [slot][group]
  std::vector<std::vector<int64_t>> fed_;       // [slot][group] tokens fed (their entries are in the pages)
  struct HostRun {
    int slot = 0;
    int64_t p0 = 0, n = 0;
  };
  std::vector<HostRun> runs_;                   // the current call's runs (begin)
  std::unique_ptr<AttentionWorkspace> attn_ws_;
  std::unique_ptr<MoeWorkspace> moe_ws_;
  // Expert parallelism (BackendOptions::comm, moe_ranks.h): the routed experts spread over the group.
  std::unique_ptr<MoeRanks> moe_ranks_;
  std::unique_ptr<MtpWorkspace> mtp_ws_;  // when the model has an MTP block
  int64_t logit_rows_ = 0;
  int64_t T_ = 0, run_len_ = 1;  // the current call (begin)
  // The points the lanes start from: the attention input of layer attn_in_layer_ (after its mhc pre) and
  // the query latent of layer q_latent_layer_ (after attn_q_latent); lanes holding work not yet joined.
  std::unique_ptr<StreamMark> attn_in_, q_latent_;
  int64_t attn_in_layer_ = -1, q_latent_layer_ = -1;
  bool lane_busy_[kLanes] = {};

  DeviceBuffer<int32_t> ids_, positions_, slots_;  // [max_tokens] step inputs
  int32_t* host_in_ = nullptr;                     // pinned [3, max_tokens]
  DeviceBuffer<bf16> X_, u_, y_, h_;               // [T, n, D], [T, D], [T, D], [logit_rows, D]
  DeviceBuffer<float> pre_, post_, comb_, partial_;
  DeviceBuffer<float> logits_;                     // [logit_rows, V]
  // Sampling parameters of up to logit_rows_ rows, one buffer: seed [R] u64, step [R] u64,
  // temperature [R] f32, top_p [R] f32, min_p [R] f32, top_k [R] i32, masked [R] i32 (5R u64 in all).
  DeviceBuffer<uint64_t> samp_params_;
  uint64_t* samp_host_ = nullptr;     // pinned [5R], the staging copy
  // Grammar masks [R, mask_words_] (only the masked rows' words are copied, at stage_sampling).
  int64_t mask_words_ = 0;
  DeviceBuffer<uint32_t> samp_mask_;
  uint32_t* samp_mask_host_ = nullptr;  // pinned [R, mask_words_]
  DeviceBuffer<int32_t> samp_ids_;    // [R] sampled ids
  int32_t* samp_ids_host_ = nullptr;  // pinned [R]
  std::vector<SampleRow> samp_pending_;  // set_sampling's rows, staged by execute()
  using ShapeKey = decltype(StepShape{}.key());
  struct Graph {
    cudaGraphExec_t exec = nullptr;
    int64_t kernels = 0;  // its kernel nodes
  };
  std::map<ShapeKey, Graph> graphs_;
  int64_t last_graph_kernels_ = -1;
  std::map<int64_t, bool> prepared_;
  // The fast tier's head GEMMs by row count (prepare() makes a decode shape's before its capture).
  std::map<int64_t, std::unique_ptr<LtMatmul>> head_plans_;
};

}  // namespace dsv4::cuda
