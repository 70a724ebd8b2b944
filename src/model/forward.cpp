// THE forward pass (MODEL.md §2-§8), written once against the backend's ops (backend/backend.h).
#include <algorithm>

#include "core/error.h"
#include "model/model.h"

namespace dsv4 {

// One decoder block; u holds its attention input (the previous mhc step made it). `last`: no next
// sub-layer to prepare.
void Model::block(int64_t layer, const LayerSpec& spec, bool last) {
  Backend& be = *be_;
  be.attn_qkv(layer);
  // Compressed entries of this call are emitted before any of its queries attend.
  if (spec.attn != AttnKind::Sliding) be.compress(layer, CompressorKind::Main);
  if (spec.attn == AttnKind::CSA) {
    be.compress(layer, CompressorKind::Indexer);
    be.index_topk(layer);
  }
  be.attend(layer);
  be.attn_out(layer);
  be.mhc({.post = SubLayerRef{layer, SubLayer::Attention}, .pre = SubLayerRef{layer, SubLayer::Ffn}});
  be.moe_route(layer);
  be.moe_experts(layer);
  MhcStep next{.post = SubLayerRef{layer, SubLayer::Ffn}};
  if (!last) next.pre = SubLayerRef{layer + 1, SubLayer::Attention};
  be.mhc(next);
}

void Model::body(const StepPlan& plan, const ForwardOptions* capture) {
  Backend& be = *be_;
  const int64_t L = plan.layers < 0 ? cfg_.num_layers : std::min(plan.layers, cfg_.num_layers);
  be.embed();
  if (capture && capture->hidden) capture->hidden->push_back(be.streams());
  if (L > 0) be.mhc({.pre = SubLayerRef{0, SubLayer::Attention}});
  for (int64_t i = 0; i < L; ++i) {
    block(i, cfg_.layers[size_t(i)], i + 1 == L);
    if (capture && capture->hidden && i + 1 < L) capture->hidden->push_back(be.streams());
  }
  if (plan.head_rows > 0) be.head(0, plan.head_first, plan.head_rows);
  if (plan.sample) be.sample(plan.head_rows);
}

void Model::step(const Batch& b, const StepPlan& plan) {
  check_plan(b, plan);
  announce(call_of(plan));  // before begin: a peer's hook may make calls of its own first (Runner::together)
  be_->begin(b);
  run(b, plan);
}

void Model::check_plan(const Batch& b, const StepPlan& plan) const {
  const int64_t T = b.size();  // 0: an idle rank of an expert-parallel group (the backend checks)
  if (plan.head_rows < 0 || plan.head_first < 0 || plan.head_first + plan.head_rows > T)
    fail("forward: head rows [", plan.head_first, ", ", plan.head_first + plan.head_rows, ") outside the call's ", T);
  if (plan.head_rows > be_->max_logit_rows())
    fail("forward: ", plan.head_rows, " head rows in one call, the backend holds ", be_->max_logit_rows());
  if (plan.sample && plan.head_rows == 0) fail("forward: sampling needs head rows");
}

void Model::replay(const Batch& b, const StepPlan& plan) {
  check_plan(b, plan);
  announce(call_of(plan));
  run(b, plan);
}

ModelCall Model::call_of(const StepPlan& plan) const {
  return {.layers = plan.layers < 0 || plan.layers >= cfg_.num_layers ? -1 : plan.layers};
}

void Model::run(const Batch& b, const StepPlan& plan) {
  const StepShape shape{.tokens = b.size(), .run_len = b.run_len, .layers = plan.layers, .head = 0,
                        .head_first = plan.head_first, .head_rows = plan.head_rows, .sample = plan.sample,
                        .graph = plan.graph};
  be_->execute(shape, [&] { body(plan, nullptr); });
}

Tensor Model::logits_of(const Batch& b, int64_t head, bool all) {
  const int64_t T = b.size(), V = cfg_.vocab_size;
  if (!all) {
    be_->head(head, T - 1, 1);
    return be_->logits(1);
  }
  Tensor out({T, V});
  const int64_t piece = be_->max_logit_rows();
  for (int64_t r0 = 0; r0 < T; r0 += piece) {
    const int64_t rows = std::min(piece, T - r0);
    be_->head(head, r0, rows);
    const Tensor part = be_->logits(rows);
    std::copy(part.data.begin(), part.data.end(), out.row(r0));
  }
  return out;
}

namespace {

Batch run_of(int slot, int64_t pos, const std::vector<int32_t>& tokens, int64_t t0, int64_t n) {
  Batch b;
  b.ids.assign(tokens.begin() + t0, tokens.begin() + t0 + n);
  b.positions.resize(size_t(n));
  for (int64_t t = 0; t < n; ++t) b.positions[size_t(t)] = int32_t(pos + t0 + t);
  b.slots.assign(size_t(n), slot);
  b.run_len = n;
  return b;
}

}  // namespace

Tensor Model::forward(int slot, int64_t pos, const std::vector<int32_t>& tokens, const ForwardOptions& opt) {
  const int64_t T = int64_t(tokens.size()), V = cfg_.vocab_size, chunk = be_->capacity().max_tokens;
  if (T == 0) fail("forward: empty chunk");
  if (pos + T > be_->capacity().max_ctx)
    fail("the sequence would reach ", pos + T, " positions; this model holds ", be_->capacity().max_ctx,
         " (", be_->name(), ")");
  if ((opt.hidden || opt.streams) && T > chunk)
    fail("forward: hidden states / streams of ", T, " tokens in one chunk, the backend takes ", chunk);
  Tensor out({opt.all_logits ? T : 1, V});
  for (int64_t t0 = 0; t0 < T; t0 += chunk) {
    const int64_t n = std::min(chunk, T - t0);
    const Batch b = run_of(slot, pos, tokens, t0, n);
    const bool last = t0 + n == T;
    const bool capture = opt.hidden != nullptr;
    announce({});
    be_->begin(b);
    const StepShape shape{.tokens = n, .run_len = n, .graph = !capture};
    be_->execute(shape, [&] { body(StepPlan{}, capture ? &opt : nullptr); });
    if (opt.streams && last) *opt.streams = be_->streams();
    if (opt.hidden && last) opt.hidden->push_back(be_->head_hidden(0, 0, n));  // hidden_L: after hc_head + norm
    if (opt.all_logits) {
      const Tensor l = logits_of(b, 0, true);
      std::copy(l.data.begin(), l.data.end(), out.row(t0));
    } else if (last) {
      const Tensor l = logits_of(b, 0, false);
      std::copy(l.data.begin(), l.data.end(), out.row(0));
    }
  }
  return out;
}

void Model::step_mtp(const Batch& b, const Tensor& S, int64_t k) {
  const int64_t T = b.size(), n = cfg_.hc_mult, D = cfg_.hidden_size;
  if (k < 0 || k >= be_->num_mtp()) fail("the checkpoint has ", be_->num_mtp(), " MTP block(s), block ", k, " requested");
  if (S.shape != Shape{T, n, D}) fail("MTP input streams are ", shape_str(S.shape), ", expected ", shape_str({T, n, D}));
  const int64_t layer = cfg_.num_layers + k;
  announce({.mtp = true, .block = k});
  be_->begin(b);
  be_->set_streams(S);
  const StepShape shape{.tokens = T, .run_len = b.run_len, .head = 1 + k, .mtp = true};
  be_->execute(shape, [&] {
    be_->mtp_input(k);
    be_->mhc({.pre = SubLayerRef{layer, SubLayer::Attention}});
    block(layer, cfg_.layer_at(layer), true);
  });
}

void Model::idle(const ModelCall& c) {
  if (!c.mtp) return step(Batch{}, StepPlan{.layers = c.layers});
  step_mtp(Batch{}, Tensor({0, cfg_.hc_mult, cfg_.hidden_size}), c.block);
}

Tensor Model::forward_mtp(int slot, int64_t pos, const Tensor& S, const std::vector<int32_t>& next_ids, int64_t k) {
  const int64_t T = int64_t(next_ids.size());
  if (T == 0) fail("forward_mtp: empty chunk");
  if (T > be_->capacity().max_tokens) fail("forward_mtp: ", T, " tokens in one call, the backend takes ", be_->capacity().max_tokens);
  const Batch b = run_of(slot, pos, next_ids, 0, T);
  step_mtp(b, S, k);
  return logits_of(b, 1 + k, true);
}

}  // namespace dsv4
