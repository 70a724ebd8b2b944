#include "runtime/runner.h"

#include <algorithm>
#include <chrono>

#include "backend/make_backend.h"
#include "core/error.h"

namespace dsv4 {

Runner::Runner(Model& model) : model_(model) {}

Runner::Runner(std::unique_ptr<Model> model) : owned_(std::move(model)), model_(*owned_) {}

Runner::Runner(std::unique_ptr<Model> model, std::unique_ptr<RankPeers> peers)
    : owned_(std::move(model)), peers_(std::move(peers)), model_(*owned_) {}

std::unique_ptr<Runner> Runner::load(const std::string& dir, const BackendOptions& o, const LoadProgress& progress) {
  return std::make_unique<Runner>(Model::load(dir, o, progress));
}

bool Runner::cuda_available() { return dsv4::cuda_available(); }

int64_t Runner::max_context() const {
  return std::min(model_.backend().capacity().max_ctx, config().max_position_embeddings);
}

int Runner::max_sequences() const {
  return int(std::min<int64_t>(model_.backend().capacity().max_seqs, int64_t(1) << 30));
}

int64_t Runner::call_tokens() const {
  return std::max<int64_t>(1, std::min(model_.backend().capacity().max_tokens, model_.backend().max_logit_rows()));
}

int Runner::new_sequence() {
  for (size_t i = 0; i < pos_.size(); ++i)
    if (pos_[i] < 0) {
      pos_[i] = 0;
      return int(i);
    }
  if (int64_t(pos_.size()) >= max_sequences()) fail("all ", max_sequences(), " sequence slots are taken");
  pos_.push_back(0);
  return int(pos_.size() - 1);
}

void Runner::release(int slot) {
  if (slot < 0 || size_t(slot) >= pos_.size() || pos_[size_t(slot)] < 0) return;
  pos_[size_t(slot)] = -1;
  // The slot's KV pages go back to the pool now (its next sequence starts at position 0 or is restored).
  // Called from destructors (RunnerSequence): a failure here leaves the pages to that next start.
  try {
    model_.backend().release(slot);
  } catch (const std::exception&) {
  }
}

int64_t Runner::pos(int slot) const {
  if (slot < 0 || size_t(slot) >= pos_.size() || pos_[size_t(slot)] < 0) fail("sequence slot ", slot, " is not taken");
  return pos_[size_t(slot)];
}

void Runner::resume_at(int slot, int64_t pos) {
  this->pos(slot);  // taken
  if (pos < 0 || pos >= max_context())
    fail("sequence slot ", slot, ": cannot resume at position ", pos, "; the context holds ", max_context());
  pos_[size_t(slot)] = pos;
}

void Runner::check(int slot, int64_t pos, int64_t T) const {
  if (T == 0) fail("forward: empty chunk");
  const int64_t at = this->pos(slot);
  if (at != pos) fail("sequence slot ", slot, " is at position ", at, ", not ", pos);
  if (pos + T > max_context())
    fail("the sequence would reach ", pos + T, " positions; the context holds ", max_context(), " (",
         backend_name(), ")");
}

std::vector<std::pair<int64_t, int64_t>> Runner::pieces(int64_t T) const {
  const int64_t n = model_.backend().capacity().max_tokens;
  std::vector<std::pair<int64_t, int64_t>> out;
  for (int64_t t0 = 0; t0 < T; t0 += n) out.emplace_back(t0, std::min(T, t0 + n));
  return out;
}

bool Runner::on_backend(const Draw& d) {
  return d.sampler && backend_samplable(d.sampler->params()) && d.top_logprobs < 0;
}

Batch Runner::run(int slot, int64_t pos, const std::vector<int32_t>& tokens, int64_t begin, int64_t end) const {
  Batch b;
  b.ids.assign(tokens.begin() + begin, tokens.begin() + end);
  for (int64_t t = begin; t < end; ++t) b.positions.push_back(int32_t(pos + t));
  b.slots.assign(size_t(end - begin), slot);
  b.run_len = end - begin;
  return b;
}

void Runner::announce(const Batch& b, const StepPlan& plan) {
  if (on_call_) on_call_(b, plan);
  if (peers_) peers_->call();
}

void Runner::step(const Batch& b, const StepPlan& plan) {
  announce(b, plan);
  model_.step(b, plan);
}

bool Runner::lead(int slot, int64_t pos, const std::vector<int32_t>& tokens, const PieceFn& between, int64_t& last) {
  const int64_t T = int64_t(tokens.size());
  check(slot, pos, T);
  const auto ps = pieces(T);
  for (size_t i = 0; i + 1 < ps.size(); ++i) {
    step(run(slot, pos, tokens, ps[i].first, ps[i].second), StepPlan{});
    pos_[size_t(slot)] = pos + ps[i].second;
    if (between && !between(ps[i].second, T)) return false;
  }
  last = ps.back().first;
  return true;
}

bool Runner::feed(int slot, int64_t pos, const std::vector<int32_t>& tokens, const PieceFn& between) {
  int64_t t0 = 0;
  if (!lead(slot, pos, tokens, between, t0)) return false;
  const int64_t T = int64_t(tokens.size());
  step(run(slot, pos, tokens, t0, T), StepPlan{});
  pos_[size_t(slot)] = pos + T;
  return true;
}

Tensor Runner::prefill(int slot, int64_t pos, const std::vector<int32_t>& tokens, bool all_logits) {
  const int64_t T = int64_t(tokens.size()), V = config().vocab_size;
  if (!all_logits) {
    int64_t t0 = 0;
    lead(slot, pos, tokens, {}, t0);
    const Batch b = run(slot, pos, tokens, t0, T);
    step(b, StepPlan{.head_first = b.size() - 1, .head_rows = 1});
    pos_[size_t(slot)] = pos + T;
    return model_.backend().logits(1);
  }
  // Every position's logits: Model::forward per piece (it reads the head in pieces of the rows it holds).
  check(slot, pos, T);
  Tensor out({T, V});
  for (const auto& [t0, t1] : pieces(T)) {
    const std::vector<int32_t> part(tokens.begin() + t0, tokens.begin() + t1);
    announce(run(slot, pos, tokens, t0, t1), StepPlan{.head_first = 0, .head_rows = t1 - t0});
    const Tensor l = model_.forward(slot, pos + t0, part, ForwardOptions{.all_logits = true});
    std::copy(l.data.begin(), l.data.end(), out.row(t0));
    pos_[size_t(slot)] = pos + t1;
  }
  return out;
}

namespace {

// The backend sampler's row for `d` (host rows: greedy, cheap; their logits are read back).
SampleRow backend_row(const Draw& d, bool host) {
  if (host) return SampleRow{};
  const SamplingParams& p = d.sampler->params();
  return SampleRow{.temperature = p.temperature, .top_k = p.top_k, .top_p = p.top_p, .min_p = p.min_p,
                   .seed = p.seed, .step = d.step};
}

}  // namespace

void Runner::draw_host(Draw& d, const float* logits) const {
  if (!d.sampler) fail("decode: a row without a sampler");
  static const std::vector<int32_t> kNone;
  try {
    d.id = d.sampler->sample(logits, config().vocab_size, d.history ? *d.history : kNone,
                             d.top_logprobs >= 0 ? &d.logprobs : nullptr, std::max(0, d.top_logprobs));
  } catch (const std::exception& e) {
    d.id = -1;
    d.error = e.what();
  }
}

bool Runner::prefill(int slot, int64_t pos, const std::vector<int32_t>& tokens, Draw& d, const PieceFn& between) {
  int64_t t0 = 0;
  if (!lead(slot, pos, tokens, between, t0)) return false;
  const int64_t T = int64_t(tokens.size());
  const Batch b = run(slot, pos, tokens, t0, T);
  const bool dev = on_backend(d);
  if (dev) model_.backend().set_sampling({backend_row(d, false)});
  step(b, StepPlan{.head_first = b.size() - 1, .head_rows = 1, .sample = dev});
  pos_[size_t(slot)] = pos + T;
  d.error.clear();
  if (dev)
    d.id = model_.backend().sampled(1).at(0);
  else
    draw_host(d, model_.backend().logits(1).ptr());
  return true;
}

Tensor Runner::decode(const std::vector<DecodeItem>& items) {
  const int64_t B = int64_t(items.size()), V = config().vocab_size;
  Tensor out({B, V});
  std::vector<Draw> none;
  for (int64_t b0 = 0; b0 < B; b0 += call_tokens()) {
    const int64_t b1 = std::min(B, b0 + call_tokens());
    decode_call(items, none, size_t(b0), size_t(b1));
    const Tensor l = model_.backend().logits(b1 - b0);
    std::copy(l.data.begin(), l.data.end(), out.row(b0));
  }
  return out;
}

void Runner::decode(const std::vector<DecodeItem>& items, std::vector<Draw>& draws) {
  if (draws.size() != items.size()) fail("decode: ", items.size(), " items but ", draws.size(), " draws");
  for (size_t b0 = 0; b0 < items.size(); b0 += size_t(call_tokens()))
    decode_call(items, draws, b0, std::min(items.size(), b0 + size_t(call_tokens())));
}

// One Model::step of items [b0, b1). Without draws: the logits of every row, in order. With draws:
// the host rows first (their logits are read back), then the backend-sampled ones.
void Runner::decode_call(const std::vector<DecodeItem>& items, std::vector<Draw>& draws, size_t b0, size_t b1) {
  if (b0 >= b1) fail("decode: empty batch");
  std::vector<size_t> order;
  for (size_t i = b0; i < b1; ++i)
    if (draws.empty() || !on_backend(draws[i])) order.push_back(i);
  const size_t host = order.size();
  for (size_t i = b0; i < b1; ++i)
    if (!draws.empty() && on_backend(draws[i])) order.push_back(i);
  Batch b;
  std::vector<SampleRow> rows;
  for (size_t i : order) {
    const DecodeItem& it = items[i];
    check(it.slot, it.pos, 1);
    for (int32_t s : b.slots)
      if (s == it.slot) fail("decode: slot ", it.slot, " twice in one batch");
    b.ids.push_back(it.token);
    b.positions.push_back(int32_t(it.pos));
    b.slots.push_back(it.slot);
    if (!draws.empty()) rows.push_back(backend_row(draws[i], rows.size() < host));
  }
  const int64_t B = b.size();
  const bool sample = host < order.size();
  if (sample) model_.backend().set_sampling(rows);
  step(b, StepPlan{.head_first = 0, .head_rows = B, .sample = sample});
  for (size_t i : order) pos_[size_t(items[i].slot)] = items[i].pos + 1;
  if (draws.empty()) return;
  if (host > 0) {
    const Tensor l = model_.backend().logits(int64_t(host));
    for (size_t r = 0; r < host; ++r) {
      draws[order[r]].error.clear();
      draw_host(draws[order[r]], l.row(int64_t(r)));
    }
  }
  if (sample) {
    const std::vector<int32_t> ids = model_.backend().sampled(B);
    for (size_t r = host; r < order.size(); ++r) {
      draws[order[r]].error.clear();
      draws[order[r]].id = ids.at(r);
    }
  }
}

Tensor RunnerSequence::feed(const std::vector<int32_t>& tokens, bool all) {
  Tensor l = r_.prefill(slot_, pos_, tokens, all);
  pos_ += int64_t(tokens.size());
  return l;
}

int32_t RunnerSequence::next(const std::vector<int32_t>& tokens, Sampler& sampler, const std::vector<int32_t>& history,
                             Logprobs* lp, int top_logprobs, const PieceFn& between) {
  Draw d{.sampler = &sampler, .history = &history, .step = drawn_, .top_logprobs = top_logprobs};
  const bool done = r_.prefill(slot_, pos_, tokens, d, between);
  pos_ = r_.pos(slot_);
  if (!done) return -1;
  if (!d.error.empty()) fail(d.error);
  ++drawn_;
  if (lp) *lp = std::move(d.logprobs);
  return d.id;
}

GenerationResult generate(Runner& runner, const Tokenizer& tok, const std::vector<int32_t>& prompt, Sampler& sampler,
                          const StopConditions& stop, int top_logprobs,
                          const std::function<void(const std::string&)>& on_text) {
  RunnerSequence seq(runner);
  ModelConfig cfg = runner.config();  // generate_steps stops at the end of the runner's context
  cfg.max_position_embeddings = runner.max_context();
  return generate_steps(
      cfg,
      [&](const std::vector<int32_t>& tokens, const std::vector<int32_t>& history, Logprobs* lp) {
        return seq.next(tokens, sampler, history, lp, top_logprobs);
      },
      tok, prompt, stop, top_logprobs, on_text);
}

GenerationResult generate(Model& model, const Tokenizer& tok, const std::vector<int32_t>& prompt, Sampler& sampler,
                          const StopConditions& stop, int top_logprobs,
                          const std::function<void(const std::string&)>& on_text) {
  Runner runner(model);
  return generate(runner, tok, prompt, sampler, stop, top_logprobs, on_text);
}

}  // namespace dsv4
