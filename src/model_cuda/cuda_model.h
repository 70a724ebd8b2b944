// CudaModel: the DeepSeek-V4 forward on one GPU in official numerics (MODEL.md §2-§8): weights in
// device memory (device_weights.h), per-sequence state in device slots, a prefill `forward` for a chunk
// of one sequence and a `decode_step` for a batch of sequences (one token each), captured once per
// batch size in a CUDA graph and replayed (ids, positions and slots live in device buffers the graph
// reads). Per step: embedding; per layer mHC pre, attn_norm, attention, mHC post, mHC pre, ffn_norm,
// MoE, mHC post; then hc_head + norm + head logits (fp32).
//
// Positions are the caller's: a sequence in slot s at position p feeds its next tokens at p, p+1, ...;
// a slot restarts a sequence by feeding position 0 (no reset needed, see AttentionLayerState).
#pragma once
#include <cuda_runtime.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "backend/cuda/buffer.h"
#include "backend/cuda/context.h"
#include "core/tensor.h"
#include "io/config.h"
#include "backend/cpu/cpu_weights.h"  // LoadProgress
#include "model_cuda/device_weights.h"

namespace dsv4::cuda {

struct CudaModelOptions {
  int64_t max_seqs = 1;      // state slots (largest decode batch)
  int64_t max_ctx = 4096;    // positions per sequence
  int64_t max_tokens = 256;  // tokens per call: prefill chunk, decode batch
  bool graphs = true;        // decode steps through CUDA graphs (false: plain launches)
  // FP4 routed experts of calls above kExactLinearMaxTokens tokens on the tensor cores (moe_prefill.h);
  // false: the per-(token, pick) GEMVs at any size (bit-identical to the CPU, slow for long prompts).
  bool grouped_moe_prefill = true;
  // The linears' kernels (context.h): Exact is bit-identical to the CPU; the CLI defaults to Fast.
  KernelTier kernels = KernelTier::Exact;
  int device = 0;
};

// One row's parameters of on-device sampling (sample_tokens, backend/cuda/sampling.h).
struct SampleRow {
  float temperature = 0;  // <= 0: greedy
  int32_t top_k = 0;      // 0 = off
  float top_p = 1, min_p = 0;
  uint64_t seed = 0, step = 0;  // the draw: Philox(seed, step)
};

class CudaModel {
 public:
  // From a checkpoint directory (config.json + safetensors, mmapped; tensors go to the device one by one).
  static std::unique_ptr<CudaModel> load(const std::string& dir, const CudaModelOptions& o,
                                         const LoadProgress& progress = {});
  // Random weights in the checkpoint formats for cfg (presets, benchmarks).
  static std::unique_ptr<CudaModel> dummy(const ModelConfig& cfg, const CudaModelOptions& o, uint64_t seed = 1234,
                                          const LoadProgress& progress = {});
  CudaModel(ModelConfig cfg, const Weights& w, uint64_t total_bytes, const CudaModelOptions& o,
            const LoadProgress& progress = {});
  ~CudaModel();
  CudaModel(const CudaModel&) = delete;
  CudaModel& operator=(const CudaModel&) = delete;

  const ModelConfig& config() const { return cfg_; }
  const CudaModelOptions& options() const { return opt_; }
  DeviceContext& context() { return *ctx_; }
  const DeviceWeights& weights() const { return w_; }
  int64_t logit_rows() const { return logit_rows_; }  // rows of logits_device()

  // Prefill chunk of one sequence: tokens at positions pos.. of `slot`; returns logits [T or 1, V] on
  // the host (synchronizes). T <= max_tokens.
  Tensor forward(int slot, int64_t pos, const std::vector<int32_t>& tokens, bool all_logits = false);
  // As forward, enqueue only: logits of the last position in row 0 of logits_device(). `layers` >= 0
  // runs only the first `layers` layers (debugging: the streams at a layer boundary, see streams()).
  void forward_async(int slot, int64_t pos, const std::vector<int32_t>& tokens, int64_t layers = -1);
  // The residual streams X [T, n, D] after the last call (synchronizes), as fp32.
  Tensor streams(int64_t T);

  // One decode step for B = ids.size() sequences: token ids[b] of the sequence in slots[b] at
  // positions[b]. Returns logits [B, V] on the host (synchronizes).
  Tensor decode_step(const std::vector<int32_t>& ids, const std::vector<int32_t>& slots,
                     const std::vector<int32_t>& positions);
  // Enqueue only: uploads the inputs, then replays (or captures first) the graph of batch B.
  void decode_async(const std::vector<int32_t>& ids, const std::vector<int32_t>& slots,
                    const std::vector<int32_t>& positions);
  // Replays the batch-B graph on the inputs already on the device (benchmarks). `layers` < 0: all;
  // else only the first `layers` layers run (0: embedding + head), for per-layer timing. `sample`: the
  // graph (a separate one) ends with sample_tokens over the B rows, parameters from upload_sampling.
  void replay(int64_t B, int64_t layers = -1, bool sample = false);

  // Sampling on the device. decode_sample: a decode step whose graph also samples row b with rows[b]
  // (parameters uploaded before the replay); returns the B ids (synchronizes). forward_sample: a
  // prefill chunk (as forward), then the last position sampled with `row`: the id. The logits stay in
  // logits_device() until the next call: logits_rows downloads some of them.
  std::vector<int32_t> decode_sample(const std::vector<int32_t>& ids, const std::vector<int32_t>& slots,
                                     const std::vector<int32_t>& positions, const std::vector<SampleRow>& rows);
  int32_t forward_sample(int slot, int64_t pos, const std::vector<int32_t>& tokens, const SampleRow& row);
  Tensor logits_rows(const std::vector<int64_t>& rows);  // [rows.size(), V] (synchronizes)
  // Greedy ids of the first `rows` rows of logits_device() (device argmax, ties to the lower id).
  std::vector<int32_t> greedy(int64_t rows);
  const float* logits_device() const { return logits_.get(); }

 private:
  void upload_inputs(const std::vector<int32_t>& ids, const std::vector<int32_t>& slots,
                     const std::vector<int32_t>& positions);
  // The step body: T tokens in runs of run_len from the input buffers; head over `head_rows` rows of
  // X starting at head_first. Plain launches on the stream.
  void body(int64_t T, int64_t run_len, int64_t layers, int64_t head_first, int64_t head_rows);
  void prepare(int64_t T);  // GEMM plans for T tokens (before a capture)
  Tensor download_logits(int64_t rows);
  // Stages rows into the device parameter buffer (after upload_inputs: the pinned buffer is free).
  void upload_sampling(const std::vector<SampleRow>& rows);
  void launch_sampling(int64_t rows);                // sample_tokens over rows [0, rows)
  std::vector<int32_t> download_sampled(int64_t rows);  // synchronizes

  ModelConfig cfg_;
  CudaModelOptions opt_;
  std::unique_ptr<DeviceContext> ctx_;
  DeviceWeights w_;
  std::vector<AttentionLayerState> states_;
  std::unique_ptr<AttentionWorkspace> attn_ws_;
  std::unique_ptr<MoeWorkspace> moe_ws_;
  int64_t logit_rows_ = 0;

  DeviceBuffer<int32_t> ids_, positions_, slots_;  // [max_tokens] step inputs
  int32_t* host_in_ = nullptr;                     // pinned [3, max_tokens]
  DeviceBuffer<bf16> X_, u_, y_, h_;               // [T, n, D], [T, D], [T, D], [logit_rows, D]
  DeviceBuffer<float> pre_, post_, comb_, partial_;
  DeviceBuffer<float> logits_;                     // [logit_rows, V]
  DeviceBuffer<int32_t> greedy_ids_;               // [logit_rows]
  DeviceBuffer<float> greedy_temp_;                // [logit_rows] zeros (greedy sampling)
  DeviceBuffer<uint64_t> greedy_seed_;             // [logit_rows] zeros
  // Sampling parameters of up to logit_rows_ rows, one buffer: seed [R] u64, step [R] u64,
  // temperature [R] f32, top_p [R] f32, min_p [R] f32, top_k [R] i32 (4R u64 in all).
  DeviceBuffer<uint64_t> samp_params_;
  uint64_t* samp_host_ = nullptr;  // pinned [4R], the staging copy
  DeviceBuffer<int32_t> samp_ids_;  // [R] sampled ids
  int32_t* samp_ids_host_ = nullptr;  // pinned [R]
  std::map<std::tuple<int64_t, int64_t, bool>, cudaGraphExec_t> graphs_;  // (B, layers, sample) -> graph
  std::map<int64_t, bool> prepared_;
  // The fast tier's head GEMMs by row count (prepare() makes a decode batch's before its graph capture).
  std::map<int64_t, std::unique_ptr<LtMatmul>> head_plans_;
  LtMatmul* head_plan(int64_t rows);
};

}  // namespace dsv4::cuda
