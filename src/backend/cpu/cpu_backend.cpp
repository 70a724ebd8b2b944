// The CPU backend's call handling, embedding, mHC, MTP input, head and sampler (cpu_backend.h); the
// attention ops are in cpu_attention.cpp, the MoE ops in cpu_moe.cpp.
#include "backend/cpu/cpu_backend.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <vector>

#include "backend/cpu/ops.h"
#include "backend/cpu/quantize.h"
#include "backend/cpu/rope_util.h"
#include "backend/cpu/sampling.h"
#include "backend/comm/communicator.h"
#include "core/error.h"

namespace dsv4::cpu {

CpuBackend::CpuBackend(const ModelConfig& cfg, const Weights& w, uint64_t total_bytes, const BackendOptions& o,
                       const LoadProgress& progress)
    : cfg_(cfg), cap_(o.capacity), numerics_(o.numerics),
      comm_(o.comm && o.comm->size() > 1 ? o.comm : nullptr), experts_(expert_range(cfg.n_routed_experts, o.comm)),
      w_(to_cpu_weights(w, total_bytes, progress, experts_)) {
  for (int64_t i = 0; i < cfg_.num_layers + num_mtp(); ++i)
    inv_freq_.push_back(rope_inv_freq(cfg_.rope_dim, cfg_.rope_for(cfg_.layer_at(i))));
  pages_ = std::make_shared<CpuKvPool>(cfg_, num_mtp(), cap_.kv_pages, numerics_);
}

const BlockF& CpuBackend::block_w(int64_t layer) const {
  if (layer < cfg_.num_layers) return w_.layers.at(size_t(layer));
  return w_.mtp.at(size_t(layer - cfg_.num_layers)).block;
}

Tensor CpuBackend::rows_of(const Tensor& x, const Run& r) const {
  if (r.t0 == 0 && r.n == x.dim(0)) return x;
  Tensor out({r.n, x.dim(1)});
  std::memcpy(out.ptr(), x.row(r.t0), size_t(r.n * x.dim(1)) * sizeof(float));
  return out;
}

SlotState& CpuBackend::slot_state(int slot) {
  if (slot < 0 || slot >= cap_.max_seqs) fail("cpu backend: slot ", slot, " outside [0, ", cap_.max_seqs, ")");
  if (size_t(slot) >= slots_.size()) slots_.resize(size_t(slot) + 1);
  if (!slots_[size_t(slot)]) slots_[size_t(slot)] = std::make_unique<SlotState>(cfg_, num_mtp(), pages_->format());
  return *slots_[size_t(slot)];
}

namespace {

// A slot's state: the layers' rings and compressor partial windows copied, every page table's complete
// pages shared (a reference each) and its later pages copied (at most one per group).
struct CpuSnapshot final : SlotSnapshot {
  CpuSnapshot(const SlotState& s, std::shared_ptr<CpuKvPool> pool) : state(s), kv(std::move(pool)) {
    partial.resize(state.tables.size());
    for (size_t g = 0; g < state.tables.size(); ++g) {
      std::vector<int32_t>& pages = state.tables[g].pages;
      const size_t full = std::min(pages.size(), size_t(kv->complete_pages(state, int64_t(g))));
      for (size_t i = full; i < pages.size(); ++i) {
        const uint8_t* src = kv->page(pages[i]);
        partial[g].emplace_back(src, src + kv->page_bytes());
      }
      pages.resize(full);
      for (int32_t p : pages) kv->pool().retain(p);
    }
  }
  ~CpuSnapshot() override {
    for (PageTable& t : state.tables) t.release_all(kv->pool());
  }
  CpuSnapshot(const CpuSnapshot&) = delete;
  CpuSnapshot& operator=(const CpuSnapshot&) = delete;

  uint64_t copied_bytes() const override {
    uint64_t n = 0;
    for (const LayerState& l : state.layers) {
      n += l.ring.size();
      if (l.comp) n += l.comp->bytes();
      if (l.idx_comp) n += l.idx_comp->bytes();
    }
    for (const auto& g : partial)
      for (const auto& p : g) n += p.size();
    return n;
  }
  int64_t shared_pages() const override {
    int64_t n = 0;
    for (const PageTable& t : state.tables) n += int64_t(t.pages.size());
    return n;
  }
  uint64_t bytes() const override {
    return copied_bytes() + uint64_t(shared_pages()) * uint64_t(kv->page_bytes());
  }
  PageList page_list() const override {
    PageList l;
    l.pool = kv.get();
    l.page_bytes = uint64_t(kv->page_bytes());
    for (const PageTable& t : state.tables) l.ids.insert(l.ids.end(), t.pages.begin(), t.pages.end());
    return l;
  }

  SlotState state;  // its tables hold the shared pages only
  std::shared_ptr<CpuKvPool> kv;
  std::vector<std::vector<std::vector<uint8_t>>> partial;  // [group][page after the shared ones] copies
};

}  // namespace

std::shared_ptr<const SlotSnapshot> CpuBackend::snapshot(int slot, int64_t pos, int64_t mtp_pos) {
  auto s = std::make_shared<CpuSnapshot>(slot_state(slot), pages_);
  s->pos = pos;
  s->mtp_pos = mtp_pos;
  return s;
}

void CpuBackend::restore(int slot, const SlotSnapshot& s) {
  const auto* c = dynamic_cast<const CpuSnapshot*>(&s);
  if (!c || c->kv != pages_) fail("cpu backend: a snapshot of another backend cannot be restored here");
  SlotState next = c->state;  // the layers; the tables' shared pages, referenced once more below
  for (size_t g = 0; g < next.tables.size(); ++g) {
    PageTable& t = next.tables[g];
    for (int32_t p : t.pages) pages_->pool().retain(p);
    for (const std::vector<uint8_t>& copy : c->partial[g]) {
      t.pages.push_back(pages_->pool().alloc());
      std::copy(copy.begin(), copy.end(), pages_->page(t.pages.back()));
    }
  }
  release(slot);
  slot_state(slot) = std::move(next);
}

void CpuBackend::release(int slot) {
  SlotState& st = slot_state(slot);
  for (PageTable& t : st.tables) t.release_all(pages_->pool());
  st = SlotState(cfg_, num_mtp(), pages_->format());
}

KvPageInfo CpuBackend::kv_pages() const {
  return {.page_tokens = pages_->geometry().page_tokens, .capacity = pages_->pool().capacity(),
          .used = pages_->pool().used_pages(), .paged_groups = pages_->geometry().paged_groups(),
          .page_bytes = pages_->page_bytes(),
          .storage = pages_->format().records ? "compact records" : "float32 rows"};
}

void CpuBackend::begin(const Batch& b) {
  const int64_t T = b.size();
  // A rank of an expert-parallel group with nothing to do still joins every call (0 tokens).
  if (T < (comm_ ? 0 : 1) || T > cap_.max_tokens)
    fail("cpu backend: ", T, " tokens in one call, expected 1 to ", cap_.max_tokens);
  if (b.positions.size() != b.ids.size() || b.slots.size() != b.ids.size())
    fail("cpu backend: ids, positions and slots differ in length");
  if (b.run_len < 1 || (T > 0 && T % b.run_len != 0)) fail("cpu backend: ", T, " tokens in runs of ", b.run_len);
  for (int64_t t = 0; t < T; ++t) {
    const int32_t id = b.ids[size_t(t)], s = b.slots[size_t(t)], p = b.positions[size_t(t)];
    if (id < 0 || id >= cfg_.vocab_size) fail("token id ", id, " is outside the vocabulary [0, ", cfg_.vocab_size, ")");
    if (s < 0 || s >= cap_.max_seqs) fail("cpu backend: slot ", s, " outside [0, ", cap_.max_seqs, ")");
    if (p < 0 || p >= cap_.max_ctx) fail("cpu backend: position ", p, " outside the context of ", cap_.max_ctx);
  }
  runs_.clear();
  for (int64_t t0 = 0; t0 < T; t0 += b.run_len) {
    const Run r{.slot = b.slots[size_t(t0)], .t0 = t0, .n = b.run_len, .p0 = b.positions[size_t(t0)]};
    for (int64_t t = 1; t < r.n; ++t)
      if (b.slots[size_t(t0 + t)] != r.slot || b.positions[size_t(t0 + t)] != r.p0 + t)
        fail("cpu backend: the run at row ", t0, " is not consecutive positions of one slot");
    for (const Run& o : runs_)
      if (o.slot == r.slot) fail("cpu backend: slot ", r.slot, " appears in two runs of one call");
    slot_state(r.slot);
    runs_.push_back(r);
  }
  batch_ = b;
}

void CpuBackend::execute(const StepShape& shape, const std::function<void()>& body) {
  (void)shape;
  body();
}

void CpuBackend::embed() {
  const int64_t T = batch_.size(), n = cfg_.hc_mult, D = cfg_.hidden_size;
  X_ = Tensor({T, n, D});
  for (int64_t t = 0; t < T; ++t)
    for (int64_t j = 0; j < n; ++j)
      std::memcpy(X_.ptr() + (t * n + j) * D, w_.embed.row(batch_.ids[size_t(t)]), size_t(D) * sizeof(float));
}

void CpuBackend::mhc(const MhcStep& s) {
  const int64_t T = batch_.size(), n = cfg_.hc_mult, D = cfg_.hidden_size;
  const float eps = float(cfg_.rms_norm_eps), hc_eps = float(cfg_.hc_eps);
  const QuantSim q(numerics_);
  if (s.post) {
    Tensor Xn({T, n, D});
    for (int64_t t = 0; t < T; ++t)
      mhc_post(X_.ptr() + t * n * D, n, D, y_.row(t), &post_[size_t(t * n)], &comb_[size_t(t * n * n)],
               Xn.ptr() + t * n * D);
    q.bf16(Xn.ptr(), Xn.numel());
    X_ = std::move(Xn);
  }
  if (!s.pre) return;
  const BlockF& w = block_w(s.pre->layer);
  const bool attn = s.pre->sub == SubLayer::Attention;
  const HcF& hc = attn ? w.hc_attn : w.hc_ffn;
  const Tensor& norm_w = attn ? w.attn_norm : w.ffn_norm;
  pre_.resize(size_t(T * n));
  post_.resize(size_t(T * n));
  comb_.resize(size_t(T * n * n));
  u_ = Tensor({T, D});
  for (int64_t t = 0; t < T; ++t) {
    const float* Xt = X_.ptr() + t * n * D;
    mhc_coeffs(Xt, n, D, hc.fn.ptr(), hc.base.ptr(), hc.scale.ptr(), eps, hc_eps, int(cfg_.hc_sinkhorn_iters),
               &pre_[size_t(t * n)], &post_[size_t(t * n)], &comb_[size_t(t * n * n)]);
    mhc_collapse(Xt, n, D, &pre_[size_t(t * n)], u_.row(t));
  }
  q.bf16(u_.ptr(), u_.numel());
  rms_norm(u_.ptr(), T, D, norm_w.ptr(), eps, u_.ptr());
  q.bf16(u_.ptr(), u_.numel());
}

void CpuBackend::mtp_input(int64_t k) {
  const int64_t T = batch_.size(), n = cfg_.hc_mult, D = cfg_.hidden_size;
  if (k < 0 || k >= num_mtp()) fail("the checkpoint has ", num_mtp(), " MTP block(s), block ", k, " requested");
  if (S_.shape != Shape{T, n, D}) fail("MTP input streams are ", shape_str(S_.shape), ", expected ", shape_str({T, n, D}));
  const MtpF& m = w_.mtp[size_t(k)];
  const QuantSim q(numerics_);
  const float eps = float(cfg_.rms_norm_eps);
  // X0[t, j] = e_proj(enorm(embed(next id))) + h_proj(hnorm(S[t, j]))
  Tensor e({T, D}), ep({T, D}), h = S_, hp({T * n, D});
  for (int64_t t = 0; t < T; ++t)
    std::memcpy(e.row(t), w_.embed.row(batch_.ids[size_t(t)]), size_t(D) * sizeof(float));
  rms_norm(e.ptr(), T, D, m.enorm.ptr(), eps, e.ptr());
  q.bf16(e.ptr(), e.numel());
  q.linear(m.e_proj, e, ep);
  h.shape = {T * n, D};
  rms_norm(h.ptr(), T * n, D, m.hnorm.ptr(), eps, h.ptr());
  q.bf16(h.ptr(), h.numel());
  q.linear(m.h_proj, h, hp);
  X_ = Tensor({T, n, D});
  for (int64_t t = 0; t < T; ++t)
    for (int64_t j = 0; j < n; ++j)
      for (int64_t c = 0; c < D; ++c) X_.ptr()[(t * n + j) * D + c] = ep.row(t)[c] + hp.row(t * n + j)[c];
  q.bf16(X_.ptr(), X_.numel());
}

Tensor CpuBackend::head_hidden(int64_t head, int64_t first, int64_t rows) {
  const int64_t n = cfg_.hc_mult, D = cfg_.hidden_size;
  if (head < 0 || head > num_mtp()) fail("head ", head, " does not exist (", num_mtp(), " MTP block(s))");
  if (first < 0 || rows < 0 || first + rows > X_.dim(0)) fail("cpu backend: head rows outside the call");
  const HcF& hc = head == 0 ? w_.hc_head : w_.mtp[size_t(head - 1)].hc_head;
  const Tensor& norm = head == 0 ? w_.norm : w_.mtp[size_t(head - 1)].norm;
  Tensor h({rows, D});
  std::vector<float> pre(static_cast<size_t>(n));
  for (int64_t t = first; t < first + rows; ++t) {
    const float* Xt = X_.ptr() + t * n * D;
    mhc_head_coeffs(Xt, n, D, hc.fn.ptr(), hc.base.ptr(), hc.scale.ptr(), float(cfg_.rms_norm_eps),
                    float(cfg_.hc_eps), pre.data());
    mhc_collapse(Xt, n, D, pre.data(), h.row(t - first));
  }
  const QuantSim q(numerics_);
  q.bf16(h.ptr(), h.numel());
  rms_norm(h.ptr(), rows, D, norm.ptr(), float(cfg_.rms_norm_eps), h.ptr());
  q.bf16(h.ptr(), h.numel());
  return h;
}

void CpuBackend::head(int64_t head, int64_t first, int64_t rows) {
  const Tensor h = head_hidden(head, first, rows);
  logits_ = Tensor({rows, cfg_.vocab_size});
  matmul(h.ptr(), rows, cfg_.hidden_size, w_.head.ptr(), cfg_.vocab_size, logits_.ptr());
}

void CpuBackend::sample(int64_t rows) {
  if (rows > logits_.dim(0) || int64_t(sampling_.size()) < rows)
    fail("cpu backend: sampling ", rows, " rows with ", sampling_.size(), " parameter rows and ", logits_.dim(0),
         " logit rows");
  sampled_.resize(size_t(rows));
  for (int64_t r = 0; r < rows; ++r)
    sampled_[size_t(r)] = sample_philox(logits_.row(r), cfg_.vocab_size, sampling_[size_t(r)]);
}

Tensor CpuBackend::logits(int64_t rows) {
  if (rows < 0 || rows > logits_.dim(0)) fail("cpu backend: ", rows, " logit rows requested, ", logits_.dim(0), " computed");
  if (rows == logits_.dim(0)) return logits_;
  Tensor out({rows, cfg_.vocab_size});
  std::memcpy(out.ptr(), logits_.ptr(), size_t(rows * cfg_.vocab_size) * sizeof(float));
  return out;
}

std::vector<int32_t> CpuBackend::sampled(int64_t rows) {
  if (rows < 0 || rows > int64_t(sampled_.size())) fail("cpu backend: ", rows, " sampled rows requested, ", sampled_.size(), " drawn");
  return std::vector<int32_t>(sampled_.begin(), sampled_.begin() + rows);
}

double CpuBackend::time_ms(int64_t warmup, int64_t reps, const std::function<void()>& fn) {
  if (reps < 1) fail("time_ms: at least one repetition");
  for (int64_t i = 0; i < warmup; ++i) fn();
  std::vector<double> ms;
  for (int64_t i = 0; i < reps; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    fn();
    ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  std::nth_element(ms.begin(), ms.begin() + ptrdiff_t(ms.size() / 2), ms.end());
  return ms[ms.size() / 2];
}

}  // namespace dsv4::cpu
