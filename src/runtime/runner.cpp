#include "runtime/runner.h"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <mutex>

#include "backend/make_backend.h"
#include "core/error.h"

namespace dsv4 {

Runner::Runner(Model& model) : model_(model) {}

Runner::Runner(std::unique_ptr<Model> model) : owned_(std::move(model)), model_(*owned_) {}

Runner::Runner(std::unique_ptr<Model> model, std::unique_ptr<RankPeers> peers)
    : owned_(std::move(model)), peers_(std::move(peers)), model_(*owned_) {
  model_.on_call([p = peers_.get()](const ModelCall& c) { p->call(c); });
}

Runner::Runner(std::unique_ptr<RankSet> ranks) : ranks_(std::move(ranks)), model_(ranks_->rank(0).model()) {}

int Runner::ranks() const { return ranks_ ? ranks_->size() : 1; }

Runner& Runner::rank(int r) {
  if (!ranks_) {
    if (r != 0) fail("rank ", r, " of a runner without ranks");
    return *this;
  }
  return ranks_->rank(r);
}

int Runner::rank_of(int slot) const {
  if (!ranks_) {
    pos(slot);  // taken
    return 0;
  }
  return placed(slot).rank;
}

int Runner::local_slot(int slot) const {
  if (!ranks_) {
    pos(slot);  // taken
    return slot;
  }
  return placed(slot).local;
}

std::unique_ptr<Runner> Runner::load(const std::string& dir, const BackendOptions& o, const LoadProgress& progress) {
  return std::make_unique<Runner>(Model::load(dir, o, progress));
}

bool Runner::cuda_available() { return dsv4::cuda_available(); }
int Runner::cuda_devices() { return dsv4::cuda_device_count(); }

int64_t Runner::max_context() const {
  return std::min(model_.backend().capacity().max_ctx, config().max_position_embeddings);
}

int Runner::max_sequences() const {
  if (ranks_) {
    int64_t n = 0;
    for (int r = 0; r < ranks_->size(); ++r) n += ranks_->rank(r).max_sequences();
    return int(std::min<int64_t>(n, int64_t(1) << 30));
  }
  return int(std::min<int64_t>(model_.backend().capacity().max_seqs, int64_t(1) << 30));
}

int64_t Runner::call_tokens() const {
  return std::max<int64_t>(1, std::min(model_.backend().capacity().max_tokens, model_.backend().max_logit_rows()));
}

std::vector<Runner::RankLoad> Runner::rank_loads() const {
  if (!ranks_) {
    RankLoad l{.held = 0, .slots = max_sequences()};
    for (int64_t p : pos_) l.held += p >= 0;
    return {l};
  }
  std::vector<RankLoad> out(size_t(ranks_->size()));
  for (int r = 0; r < ranks_->size(); ++r) out[size_t(r)].slots = ranks_->rank(r).max_sequences();
  for (const Placed& p : placed_)
    if (p.rank >= 0) ++out[size_t(p.rank)].held;
  return out;
}

int Runner::new_sequence(int rank) {
  if (rank < -1 || rank >= ranks()) fail("new_sequence: rank ", rank, " of ", ranks(), " (expected -1 to ", ranks() - 1, ")");
  if (ranks_) {
    // The rank asked, or the one holding the fewest sequences (ties: the lowest) that has a slot left.
    const std::vector<RankLoad> load = rank_loads();
    int best = -1;
    for (int r = 0; r < ranks_->size(); ++r) {
      const RankLoad& l = load[size_t(r)];
      if ((rank < 0 || r == rank) && l.held < l.slots && (best < 0 || l.held < load[size_t(best)].held)) best = r;
    }
    if (best < 0) {
      if (rank >= 0) fail("all ", load[size_t(rank)].slots, " sequence slots of rank ", rank, " are taken");
      fail("all ", max_sequences(), " sequence slots are taken");
    }
    const Placed p{.rank = best, .local = ranks_->rank(best).new_sequence()};
    for (size_t i = 0; i < placed_.size(); ++i)
      if (placed_[i].rank < 0) {
        placed_[i] = p;
        return int(i);
      }
    placed_.push_back(p);
    return int(placed_.size() - 1);
  }
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
  if (ranks_) {
    if (slot < 0 || size_t(slot) >= placed_.size() || placed_[size_t(slot)].rank < 0) return;
    Placed& p = placed_[size_t(slot)];
    ranks_->rank(p.rank).release(p.local);  // that rank's runner gives the slot's KV pages back
    p = Placed{};
    return;
  }
  if (slot < 0 || size_t(slot) >= pos_.size() || pos_[size_t(slot)] < 0) return;
  pos_[size_t(slot)] = -1;
  // The slot's KV pages go back to the pool now (its next sequence starts at position 0 or is restored).
  // Called from destructors (RunnerSequence): a failure here leaves the pages to that next start.
  try {
    model_.backend().release(slot);
  } catch (const std::exception&) {
  }
}

const Runner::Placed& Runner::placed(int slot) const {
  if (slot < 0 || size_t(slot) >= placed_.size() || placed_[size_t(slot)].rank < 0)
    fail("sequence slot ", slot, " is not taken");
  return placed_[size_t(slot)];
}

int64_t Runner::pos(int slot) const {
  if (ranks_) {
    const Placed& p = placed(slot);
    return ranks_->rank(p.rank).pos(p.local);
  }
  if (slot < 0 || size_t(slot) >= pos_.size() || pos_[size_t(slot)] < 0) fail("sequence slot ", slot, " is not taken");
  return pos_[size_t(slot)];
}

void Runner::resume_at(int slot, int64_t pos) {
  if (ranks_) {
    const Placed& p = placed(slot);
    return ranks_->rank(p.rank).resume_at(p.local, pos);
  }
  this->pos(slot);  // taken
  if (pos < 0 || pos >= max_context())
    fail("sequence slot ", slot, ": cannot resume at position ", pos, "; the context holds ", max_context());
  pos_[size_t(slot)] = pos;
}

std::shared_ptr<const SlotSnapshot> Runner::snapshot(int slot, int64_t pos, int64_t mtp_pos) {
  std::shared_ptr<const SlotSnapshot> s;
  if (ranks_) {
    const Placed p = placed(slot);
    on_rank(p.rank, [&](Runner& x) { s = x.snapshot(p.local, pos, mtp_pos); });
    return s;
  }
  this->pos(slot);  // taken
  return model_.backend().snapshot(slot, pos, mtp_pos);
}

void Runner::restore(int slot, const SlotSnapshot& s) {
  if (ranks_) {
    const Placed p = placed(slot);
    return on_rank(p.rank, [&](Runner& x) { x.restore(p.local, s); });
  }
  this->pos(slot);  // taken
  if (s.pos < 0 || s.pos >= max_context())
    fail("sequence slot ", slot, ": a snapshot at position ", s.pos, "; the context holds ", max_context());
  model_.backend().restore(slot, s);
  pos_[size_t(slot)] = s.pos;
}

KvPageInfo Runner::kv_pages(int rank) {
  if (!ranks_) {
    if (rank != 0) fail("kv_pages: rank ", rank, " of a runner without ranks");
    return model_.backend().kv_pages();
  }
  if (rank < 0 || rank >= ranks_->size()) fail("kv_pages: rank ", rank, " of ", ranks_->size());
  KvPageInfo info;
  on_rank(rank, [&](Runner& x) { info = x.kv_pages(); });
  return info;
}

void Runner::check(int slot, int64_t pos, int64_t T) const {
  if (ranks_) {
    const Placed& p = placed(slot);
    return ranks_->rank(p.rank).check(p.local, pos, T);
  }
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

// ---- data-parallel ranks

void Runner::round(int owner, const std::function<void(Runner&)>& mine) {
  ranks_->each([&](int r) {
    Runner& x = ranks_->rank(r);
    if (r == owner)
      mine(x);
    else
      x.model().idle();  // no rows: its MoE layers serve the owner's tokens
  });
}

void Runner::mirrored(int owner, const std::function<void(Runner&)>& fn) {
  if (owner < 0 || owner >= ranks()) fail("mirrored: rank ", owner, " of ", ranks());
  // The owner's calls alone: every other rank is done at once and idles in each step (together).
  together([&](int r, Runner& x) {
    if (r == owner) fn(x);
  });
}

int64_t Runner::together(const std::function<void(int rank, Runner& x)>& fn) {
  if (!ranks_) {
    fn(0, *this);
    return 0;
  }
  const int n = ranks_->size();
  std::mutex mu;
  std::condition_variable cv;
  std::vector<ModelCall> steps;                 // the schedule: step s's kind
  std::vector<ModelCall> want(static_cast<size_t>(n));  // a rank's pending call
  std::vector<int64_t> posted(static_cast<size_t>(n), -1);  // the step a rank's pending call is posted for
  std::vector<char> finished(static_cast<size_t>(n), 0);
  int running = n;
  // Under mu: the next step's kind once every running rank has posted for it.
  auto decide = [&] {
    const int64_t s = int64_t(steps.size());
    int first = -1;
    for (int r = 0; r < n; ++r) {
      if (finished[size_t(r)]) continue;
      if (posted[size_t(r)] != s) return;
      if (first < 0) first = r;
    }
    if (first < 0) return;
    steps.push_back(want[size_t(first)]);
    cv.notify_all();
  };
  ranks_->each([&](int r) {
    Runner& x = ranks_->rank(r);
    Model& m = x.model();
    int64_t next = 0;  // the step this rank acts in next
    bool idling = false;
    auto idle = [&](const ModelCall& c) {
      idling = true;
      try {
        m.idle(c);
      } catch (...) {
        idling = false;
        throw;
      }
      idling = false;
    };
    m.on_call([&](const ModelCall& c) {
      if (idling) return;  // this rank's own idle call of a step
      std::unique_lock<std::mutex> lock(mu);
      want[size_t(r)] = c;
      for (;;) {
        posted[size_t(r)] = next;
        decide();
        cv.wait(lock, [&] { return int64_t(steps.size()) > next; });
        const ModelCall step = steps[size_t(next++)];
        if (step == c) return;  // the step is this call
        lock.unlock();
        idle(step);
        lock.lock();
      }
    });
    auto finish = [&] {
      m.on_call({});
      std::unique_lock<std::mutex> lock(mu);
      finished[size_t(r)] = 1;
      --running;
      decide();
      cv.notify_all();
      for (;;) {  // idle in every step still to come
        cv.wait(lock, [&] { return int64_t(steps.size()) > next || running == 0; });
        if (int64_t(steps.size()) == next) return;
        const ModelCall step = steps[size_t(next++)];
        lock.unlock();
        idle(step);
        lock.lock();
      }
    };
    try {
      fn(r, x);
    } catch (...) {
      finish();
      throw;
    }
    finish();
  });
  return int64_t(steps.size());
}

void Runner::on_rank(int owner, const std::function<void(Runner&)>& fn) {
  ranks_->each([&](int r) {
    if (r == owner) fn(ranks_->rank(r));
  });
}

bool Runner::ranked_chunk(int slot, int64_t pos, const std::vector<int32_t>& tokens, const PieceFn& between,
                          const std::function<void(Runner& x, int local, int64_t t0, int64_t t1)>& piece) {
  const int64_t T = int64_t(tokens.size());
  check(slot, pos, T);  // before the first round: a rank that refused its call would leave the others waiting
  const Placed p = placed(slot);
  const auto ps = pieces(T);
  for (size_t i = 0; i < ps.size(); ++i) {
    const auto [t0, t1] = ps[i];
    round(p.rank, [&](Runner& x) { piece(x, p.local, t0, t1); });
    if (i + 1 < ps.size() && between && !between(t1, T)) return false;
  }
  return true;
}

namespace {
std::vector<int32_t> part(const std::vector<int32_t>& tokens, int64_t t0, int64_t t1) {
  return {tokens.begin() + t0, tokens.begin() + t1};
}
}  // namespace

// The batch split by rank (each rank's rows in the batch's order), in rounds of at most call_tokens()
// rows per rank: every rank makes as many calls as the rank with the most rows, with 0 rows once its
// own are done. Each row's logits (or draw) goes back to its place in the batch.
void Runner::ranked_decode(const std::vector<DecodeItem>& items, std::vector<Draw>* draws, Tensor* logits) {
  if (items.empty()) fail("decode: empty batch");
  const int N = ranks_->size();
  std::vector<std::vector<size_t>> of(static_cast<size_t>(N));
  std::vector<int> seen;
  for (size_t i = 0; i < items.size(); ++i) {
    check(items[i].slot, items[i].pos, 1);
    if (std::find(seen.begin(), seen.end(), items[i].slot) != seen.end())
      fail("decode: slot ", items[i].slot, " twice in one batch");
    seen.push_back(items[i].slot);
    of[size_t(placed(items[i].slot).rank)].push_back(i);
  }
  const size_t ct = size_t(call_tokens());
  size_t rounds = 0;
  for (const auto& rows : of) rounds = std::max(rounds, (rows.size() + ct - 1) / ct);
  const int64_t V = config().vocab_size;
  ranks_->each([&](int r) {
    Runner& x = ranks_->rank(r);
    const std::vector<size_t>& rows = of[size_t(r)];
    for (size_t k = 0; k < rounds; ++k) {
      const size_t b0 = std::min(rows.size(), k * ct), b1 = std::min(rows.size(), b0 + ct);
      if (b0 == b1) {
        x.model().step(Batch{}, StepPlan{});
        continue;
      }
      std::vector<DecodeItem> sub;
      for (size_t j = b0; j < b1; ++j) {
        const DecodeItem& it = items[rows[j]];
        sub.push_back({.slot = placed(it.slot).local, .token = it.token, .pos = it.pos});
      }
      if (draws) {
        std::vector<Draw> d;
        for (size_t j = b0; j < b1; ++j) d.push_back((*draws)[rows[j]]);
        x.decode(sub, d);
        for (size_t j = b0; j < b1; ++j) (*draws)[rows[j]] = std::move(d[j - b0]);
      } else {
        const Tensor l = x.decode(sub);
        for (size_t j = b0; j < b1; ++j) std::copy_n(l.row(int64_t(j - b0)), V, logits->row(int64_t(rows[j])));
      }
    }
  });
}

// ---- calls

bool Runner::feed(int slot, int64_t pos, const std::vector<int32_t>& tokens, const PieceFn& between) {
  if (ranks_)
    return ranked_chunk(slot, pos, tokens, between, [&](Runner& x, int local, int64_t t0, int64_t t1) {
      x.feed(local, pos + t0, part(tokens, t0, t1));
    });
  int64_t t0 = 0;
  if (!lead(slot, pos, tokens, between, t0)) return false;
  const int64_t T = int64_t(tokens.size());
  step(run(slot, pos, tokens, t0, T), StepPlan{});
  pos_[size_t(slot)] = pos + T;
  return true;
}

Tensor Runner::prefill(int slot, int64_t pos, const std::vector<int32_t>& tokens, bool all_logits) {
  const int64_t T = int64_t(tokens.size()), V = config().vocab_size;
  if (ranks_) {
    Tensor out({all_logits ? T : 1, V});
    ranked_chunk(slot, pos, tokens, {}, [&](Runner& x, int local, int64_t t0, int64_t t1) {
      if (all_logits) {
        const Tensor l = x.prefill(local, pos + t0, part(tokens, t0, t1), true);
        std::copy(l.data.begin(), l.data.end(), out.row(t0));
      } else if (t1 < T) {
        x.feed(local, pos + t0, part(tokens, t0, t1));
      } else {
        out = x.prefill(local, pos + t0, part(tokens, t0, t1));
      }
    });
    return out;
  }
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

// The backend sampler's row for `d` (host rows: greedy, cheap; their logits are read back), with
// the grammar's mask of this step when one constrains it. A mask that cannot be made (the grammar
// allows nothing) leaves d.error set: the row is drawn unconstrained and its id dropped (take_backend).
SampleRow backend_row(Draw& d, bool host, int64_t vocab) {
  if (host) return SampleRow{};
  const SamplingParams& p = d.sampler->params();
  SampleRow r{.temperature = p.temperature, .top_k = p.top_k, .top_p = p.top_p, .min_p = p.min_p,
              .seed = p.seed, .step = d.step};
  try {
    if (const grammar::TokenMask* m = d.sampler->step_mask(vocab)) r.mask = m->data();
  } catch (const std::exception& e) {
    d.error = e.what();
  }
  return r;
}

// The backend's id for `d`: advances its grammar (a refused id, or an earlier error: d.id = -1).
void take_backend(Draw& d, int32_t id) {
  d.id = -1;
  if (!d.error.empty()) return;
  try {
    d.sampler->accept(id);
    d.id = id;
  } catch (const std::exception& e) {
    d.error = e.what();
  }
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
  if (ranks_)
    return ranked_chunk(slot, pos, tokens, between, [&](Runner& x, int local, int64_t t0, int64_t t1) {
      if (t1 < int64_t(tokens.size()))
        x.feed(local, pos + t0, part(tokens, t0, t1));
      else
        x.prefill(local, pos + t0, part(tokens, t0, t1), d);
    });
  int64_t t0 = 0;
  if (!lead(slot, pos, tokens, between, t0)) return false;
  const int64_t T = int64_t(tokens.size());
  const Batch b = run(slot, pos, tokens, t0, T);
  d.error.clear();
  const bool dev = on_backend(d);
  if (dev) model_.backend().set_sampling({backend_row(d, false, config().vocab_size)});
  step(b, StepPlan{.head_first = b.size() - 1, .head_rows = 1, .sample = dev});
  pos_[size_t(slot)] = pos + T;
  if (dev)
    take_backend(d, model_.backend().sampled(1).at(0));
  else
    draw_host(d, model_.backend().logits(1).ptr());
  return true;
}

Tensor Runner::decode(const std::vector<DecodeItem>& items) {
  const int64_t B = int64_t(items.size()), V = config().vocab_size;
  Tensor out({B, V});
  if (ranks_) {
    ranked_decode(items, nullptr, &out);
    return out;
  }
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
  if (ranks_) return ranked_decode(items, &draws, nullptr);
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
    if (!draws.empty()) {
      draws[i].error.clear();
      rows.push_back(backend_row(draws[i], rows.size() < host, config().vocab_size));
    }
  }
  const int64_t B = b.size();
  const bool sample = host < order.size();
  if (sample) model_.backend().set_sampling(rows);
  step(b, StepPlan{.head_first = 0, .head_rows = B, .sample = sample});
  for (size_t i : order) pos_[size_t(items[i].slot)] = items[i].pos + 1;
  if (draws.empty()) return;
  if (host > 0) {
    const Tensor l = model_.backend().logits(int64_t(host));
    for (size_t r = 0; r < host; ++r) draw_host(draws[order[r]], l.row(int64_t(r)));
  }
  if (sample) {
    const std::vector<int32_t> ids = model_.backend().sampled(B);
    for (size_t r = host; r < order.size(); ++r) take_backend(draws[order[r]], ids.at(r));
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
