// The CPU backend (backend/backend.h): every weight decoded to float32 (cpu_weights.h), a SlotState per
// slot (state.h) made on first use, the compressed entries in a KV page pool (CpuKvPool), the activations of the current call as float32 tensors, and the
// ops in both numerics (quantize.h: reference = plain float32, official = DeepSeek's rounding and
// quantization sites). Row-wise ops (linears, norms, the MoE) run over the whole call at once; the
// ops that read or write a sequence's state (compressors, indexer, attention) run run by run. Every row's
// arithmetic is the same whatever else is in the call, so a decode batch gives each sequence the logits
// of a lone forward, bit for bit.
#pragma once
#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "backend/backend.h"
#include "backend/cpu/cpu_weights.h"
#include "backend/cpu/state.h"
#include "core/tensor.h"
#include "io/weights.h"

namespace dsv4::cpu {

class CpuBackend final : public Backend {
 public:
  CpuBackend(const ModelConfig& cfg, const Weights& w, uint64_t total_bytes, const BackendOptions& o,
             const LoadProgress& progress = {});

  const ModelConfig& config() const override { return cfg_; }
  const Capacity& capacity() const override { return cap_; }
  Numerics numerics() const override { return numerics_; }
  std::string name() const override { return "cpu"; }
  int64_t num_mtp() const override { return int64_t(w_.mtp.size()); }

  void begin(const Batch& b) override;
  void execute(const StepShape& shape, const std::function<void()>& body) override;
  void set_sampling(const std::vector<SampleRow>& rows) override { sampling_ = rows; }

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

  int64_t max_logit_rows() const override { return cap_.max_tokens; }
  Tensor logits(int64_t rows) override;
  std::vector<int32_t> sampled(int64_t rows) override;
  Tensor streams() override { return X_; }
  Tensor head_hidden(int64_t head, int64_t first, int64_t rows) override;
  void set_streams(const Tensor& S) override { S_ = S; }
  double time_ms(int64_t warmup, int64_t reps, const std::function<void()>& fn) override;

 private:
  struct Run {  // rows [t0, t0 + n) of the call: one sequence in `slot` at positions p0 ..
    int slot = 0;
    int64_t t0 = 0, n = 0, p0 = 0;
  };
  const BlockF& block_w(int64_t layer) const;
  SlotState& slot_state(int slot);  // made on first use
  LayerState& state(const Run& r, int64_t layer) { return slots_[size_t(r.slot)]->layers[size_t(layer)]; }
  // The entries (indexer: keys) of a layer of the run's slot, in the pool's pages.
  EntryView entries(const Run& r, int64_t layer, bool indexer) {
    return {.pool = pages_.get(), .table = &slots_[size_t(r.slot)]->tables[size_t(pages_->geometry().group_of(layer))],
            .layer = layer, .indexer = indexer};
  }
  Tensor rows_of(const Tensor& x, const Run& r) const;  // rows of this run (x itself for a one-run call)
  const std::vector<float>& inv_freq(int64_t layer) const { return inv_freq_[size_t(layer)]; }

  // Expert parallelism: the routed experts of rank r through the communicator (cpu_moe.cpp).
  void moe_experts_ranked(int64_t layer);

  ModelConfig cfg_;
  Capacity cap_;
  Numerics numerics_;
  comm::Communicator* comm_ = nullptr;  // null or one rank: every expert here
  ExpertRange experts_;                 // the routed experts this rank holds
  CpuWeights w_;
  std::vector<std::vector<float>> inv_freq_;    // [layers + MTP] the layer's RoPE table
  // The KV page pool; snapshots hold it too (they give their pages back when dropped, maybe later).
  std::shared_ptr<CpuKvPool> pages_;
  std::vector<std::unique_ptr<SlotState>> slots_;  // made on a slot's first use

  // The current call.
  Batch batch_;
  std::vector<Run> runs_;
  Tensor X_, u_, y_;                       // [T, n, D], [T, D], [T, D]
  std::vector<float> pre_, post_, comb_;   // mHC coefficients of the current sub-layer
  Tensor S_;                               // MTP input streams
  Tensor cq_, q_, kv_, o_;                 // attention: [T, qr], [T, H*d], [T, d], [T, H*d]
  std::vector<std::vector<int64_t>> topk_;  // [T] the indexer's picks
  std::vector<std::vector<std::pair<int64_t, float>>> picks_;  // [T] (expert, weight)
  Tensor logits_;                          // [rows, V]
  std::vector<SampleRow> sampling_;
  std::vector<int32_t> sampled_;
};

}  // namespace dsv4::cpu
