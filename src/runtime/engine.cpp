#include "runtime/engine.h"

#include <algorithm>
#include <optional>

#include "runtime/prefix_reuse.h"

namespace dsv4 {

using Clock = std::chrono::steady_clock;

struct Engine::Pending {
  std::shared_ptr<RequestChannel> ch;
  GenerationRequest req;
  int64_t max_new = 0;  // tokens it may generate
  int64_t pages = 0;    // cache pages it reserves
  Clock::time_point arrived;
};

// A running request: its model state, sampler and the text pipeline of the single-sequence loop
// (generate.cpp): ids -> StreamDecoder -> StopStringFilter.
struct Engine::Sequence {
  // On `rank` of a runner over data-parallel ranks (-1: the runner's choice).
  Sequence(Pending p, Runner& runner, const Tokenizer& tok, int64_t drafts, int rank)
      : ch(std::move(p.ch)),
        req(std::move(p.req)),
        runner(runner),
        slot(runner.new_sequence(rank)),
        sampler(req.sampling, req.stop.stop_ids),
        dec(tok),
        filter(req.stop.stop_strings),
        history(req.prompt),
        max_new(p.max_new),
        pages(p.pages),
        arrived(p.arrived) {
    if (drafts > 0) {
      // The lane drives its rank's model (over data-parallel ranks): that rank's slot.
      lane.emplace(runner.local_slot(slot),
                   SpeculativeOptions{.drafts = drafts, .sampling = req.sampling, .stop_ids = req.stop.stop_ids});
      speculative = speculative_sampling_ok(req.sampling) && req.top_logprobs < 0;
    }
  }
  ~Sequence() { runner.release(slot); }
  Sequence(const Sequence&) = delete;
  Sequence& operator=(const Sequence&) = delete;

  std::shared_ptr<RequestChannel> ch;
  GenerationRequest req;
  Runner& runner;
  int slot;  // the runner's sequence slot
  Sampler sampler;
  StreamDecoder dec;
  StopStringFilter filter;
  std::vector<int32_t> history;  // prompt + generated (for the penalties)
  int64_t max_new, pages;
  Clock::time_point arrived, last_token;
  int64_t prefilled = 0, generated = 0;
  int64_t pos = 0;          // the next position to feed
  int32_t next_token = -1;  // sampled, to be fed by the next decode
  bool done = false;
  std::optional<EngineEvent> final;  // set by conclude(), pushed by retire() once the slot is released
  std::optional<PromptPrefix> prefix;  // with the prefix cache: the hit and the snapshot points
  // A speculative engine: the MTP block's side of the slot (fed with every prefill chunk), and whether
  // this request decodes in rounds (its sampling allows it) or one token per step.
  std::optional<SpeculativeLane> lane;
  bool speculative = false;
  // With the prefix cache: looks the prompt up, restores a hit into the slot; prefill starts after it.
  // A speculative engine's entries carry the streams the MTP block has not fed yet.
  void restore_prefix(PrefixCache& cache) {
    prefix.emplace(cache, runner, slot, req.prompt);
    const int64_t at = prefix->start();
    if (at > 0) {
      if (lane) {
        const PrefixHit& h = prefix->hit();
        if (!h.carry) fail("prefix cache: an entry without the MTP block's streams in a speculative engine");
        lane->resume_prefill({req.prompt.begin(), req.prompt.begin() + at}, h.snapshot->mtp_pos, *h.carry);
      }
    }
    prefilled = pos = at;
  }
  // How the next token is drawn (the runner picks the backend's sampler or this Sampler).
  Draw draw() { return Draw{.sampler = &sampler, .history = &history, .step = uint64_t(generated), .top_logprobs = req.top_logprobs}; }
};

namespace {

int64_t context_of(const Runner& runner, const EngineOptions& opt) {
  const int64_t model_ctx = runner.max_context();
  return opt.max_context > 0 ? std::min(opt.max_context, model_ctx) : model_ctx;
}

double seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

using FailReason = EngineEvent::FailReason;

EngineEvent failed(const std::string& why, FailReason reason = FailReason::Internal) {
  EngineEvent e;
  e.kind = EngineEvent::Kind::Failed;
  e.fail_reason = reason;
  e.text = why;
  return e;
}

const char* const kShuttingDown = "the server is shutting down";

}  // namespace

Engine::Engine(Model& model, const Tokenizer& tok, EngineOptions opt)
    : Engine(std::make_unique<Runner>(model), nullptr, tok, opt) {}

Engine::Engine(Runner& runner, const Tokenizer& tok, EngineOptions opt) : Engine(nullptr, &runner, tok, opt) {}

Engine::Engine(std::unique_ptr<Runner> owned, Runner* runner, const Tokenizer& tok, EngineOptions opt)
    : owned_(std::move(owned)),
      runner_(owned_ ? *owned_ : *runner),
      tok_(tok),
      opt_(opt),
      max_context_(context_of(runner_, opt)),
      pool_(opt.cache_tokens > 0 ? opt.cache_tokens : int64_t(std::max(1, opt.max_num_seqs)) * max_context_,
            opt.cache_page_tokens),
      prefix_(opt.prefix_cache_bytes > 0 ? std::make_unique<PrefixCache>(PrefixCacheOptions{
                                               .budget_bytes = opt.prefix_cache_bytes, .places = runner_.ranks()})
                                         : nullptr),
      signal_(std::make_shared<EngineSignal>()) {
  if (opt_.max_num_seqs < 1) fail("max_num_seqs must be at least 1 (got ", opt_.max_num_seqs, ")");
  if (opt_.max_step_tokens < 1) fail("max_step_tokens must be at least 1 (got ", opt_.max_step_tokens, ")");
  if (opt_.max_queue < 0) fail("max_queue must not be negative (got ", opt_.max_queue, ")");
  if (opt_.max_tokens_limit < 0) fail("max_tokens_limit must not be negative (got ", opt_.max_tokens_limit, ")");
  if (runner_.max_sequences() < opt_.max_num_seqs)
    fail("max_num_seqs is ", opt_.max_num_seqs, " but the model holds ", runner_.max_sequences(), " sequences");
  opt_.prefill_chunk = std::clamp<int64_t>(opt_.prefill_chunk, 1, opt_.max_step_tokens);
  if (opt_.speculative != 0) check_speculative(runner_.model(), {.drafts = opt_.speculative});
  stats_.max_num_seqs = opt_.max_num_seqs;
  stats_.speculative = opt_.speculative;
  update_gauges(0);
  thread_ = std::thread([this] { loop(); });
}

Engine::~Engine() { shutdown(std::chrono::milliseconds(0)); }

std::shared_ptr<RequestChannel> Engine::submit(GenerationRequest req) {
  auto reject = [&](RequestRejected::Reason r, const std::string& msg) {
    {
      std::lock_guard<std::mutex> lk(stats_mu_);
      ++stats_.requests_rejected;
    }
    throw RequestRejected(r, msg);
  };
  using R = RequestRejected::Reason;
  const int64_t n = int64_t(req.prompt.size());
  if (n == 0) reject(R::Invalid, "the prompt is empty (it encodes to no tokens)");
  if (n >= max_context_)
    reject(R::TooLong, cat("the prompt has ", n, " tokens; the model's context is ", max_context_,
                           " tokens (the prompt must leave room for at least one generated token)"));
  const int64_t vocab = runner_.config().vocab_size;
  for (int32_t id : req.prompt)
    if (id < 0 || id >= vocab) reject(R::Invalid, cat("token id ", id, " is outside the vocabulary [0, ", vocab, ")"));
  Pending p;
  if (req.stop.max_tokens > 0 && n + req.stop.max_tokens > max_context_)
    reject(R::TooLong, cat("the model's context is ", max_context_, " tokens; the request asks for ",
                           n + req.stop.max_tokens, " (", n, " in the prompt, ", req.stop.max_tokens,
                           " to generate)"));
  // The context check above is on what was asked; the server's cap then only shortens the request.
  p.max_new = req.stop.max_tokens > 0 ? req.stop.max_tokens : max_context_ - n;
  if (opt_.max_tokens_limit > 0) p.max_new = std::min(p.max_new, opt_.max_tokens_limit);
  p.pages = pool_.pages_for(n + p.max_new);
  if (p.pages > pool_.total_pages())
    reject(R::TooLong, cat("the request needs ", p.pages * pool_.page_tokens(), " cache tokens (", n,
                           " prompt + ", p.max_new, " to generate); the cache holds ",
                           pool_.total_pages() * pool_.page_tokens()));
  p.ch = std::make_shared<RequestChannel>(signal_);
  p.req = std::move(req);
  p.arrived = Clock::now();
  auto ch = p.ch;
  {
    std::lock_guard<std::mutex> lk(signal_->mu);
    if (!accepting_) reject(R::Stopping, kShuttingDown);
    // Requests that a free sequence slot will take at the next step do not count as waiting.
    const int64_t free_slots = std::max<int64_t>(0, opt_.max_num_seqs - running_count_.load());
    if (int64_t(queue_.size()) >= opt_.max_queue + free_slots)
      reject(R::Overloaded, cat("the server is overloaded: ", opt_.max_num_seqs, " sequences are running and ",
                                queue_.size(), " requests are waiting"));
    queue_.push_back(std::move(p));
    ++in_flight_;
    signal_->dirty = true;
    std::lock_guard<std::mutex> ls(stats_mu_);
    ++stats_.requests_submitted;
    stats_.queued = int64_t(queue_.size());
  }
  signal_->cv.notify_all();
  return ch;
}

void Engine::shutdown(std::chrono::milliseconds grace) {
  std::lock_guard<std::mutex> once(shutdown_mu_);
  if (!thread_.joinable()) return;
  {
    std::lock_guard<std::mutex> lk(signal_->mu);
    accepting_ = false;
    signal_->dirty = true;  // the scheduler's next admit() fails what has to wait
  }
  signal_->cv.notify_all();
  const auto deadline = Clock::now() + grace;
  while (in_flight_.load() > 0 && Clock::now() < deadline) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  {
    std::lock_guard<std::mutex> lk(signal_->mu);
    stop_now_ = true;
    signal_->dirty = true;
  }
  signal_->cv.notify_all();
  thread_.join();
}

EngineStats Engine::stats() const {
  EngineStats s;
  {
    std::lock_guard<std::mutex> lk(stats_mu_);
    s = stats_;
  }
  s.prefix_cache = prefix_ != nullptr;
  if (prefix_) s.prefix = prefix_->stats();
  return s;
}

void Engine::loop() {
  uint64_t step = 0;
  while (true) {
    std::vector<Pending> admitted;
    retire();
    {
      std::unique_lock<std::mutex> lk(signal_->mu);
      signal_->cv.wait(lk, [&] { return signal_->dirty || stop_now_ || !running_.empty() || !queue_.empty(); });
      signal_->dirty = false;
      if (stop_now_) {
        std::deque<Pending> rest;
        rest.swap(queue_);
        lk.unlock();
        fail_all(rest);
        return;
      }
      admit(admitted);
    }
    // Each admitted request takes a slot (on the rank its prompt is best placed on), then with the prefix
    // cache the pools make room for every sequence and the hits are restored.
    std::vector<std::unique_ptr<Sequence>> fresh;
    for (Pending& p : admitted) {
      auto ch = p.ch;
      const int64_t pages = p.pages;
      try {
        const int rank = place(p.req.prompt);
        fresh.push_back(std::make_unique<Sequence>(std::move(p), runner_, tok_, opt_.speculative, rank));
      } catch (const std::exception& e) {  // no slot (a runner smaller than max_num_seqs)
        ch->push(failed(e.what()));
        pool_.release(pages);
        --in_flight_;
      }
    }
    if (prefix_) reclaim_pages(fresh);
    for (auto& s : fresh) {
      try {
        if (prefix_) s->restore_prefix(*prefix_);
        running_.push_back(std::move(s));
      } catch (const std::exception& e) {  // a failed restore: the request fails, its slot is freed
        s->ch->push(failed(e.what()));
        pool_.release(s->pages);
        --in_flight_;
        s.reset();
      }
    }
    run_step(step++);
  }
}

// Under signal_->mu: drops cancelled queued requests, then moves requests from the head of the queue
// while a sequence slot and their cache pages are free (first come, first served); once shutting
// down, fails the rest.
void Engine::admit(std::vector<Pending>& admitted) {
  uint64_t cancelled = 0;
  for (auto it = queue_.begin(); it != queue_.end();) {
    if (it->ch->cancelled()) {
      it->ch->push(failed("cancelled", FailReason::Cancelled));
      it = queue_.erase(it);
      ++cancelled;
      --in_flight_;
    } else {
      ++it;
    }
  }
  while (!queue_.empty() && running_.size() + admitted.size() < size_t(opt_.max_num_seqs) &&
         pool_.try_reserve(queue_.front().pages)) {
    admitted.push_back(std::move(queue_.front()));
    queue_.pop_front();
  }
  // Shutting down: a request that cannot start now would only wait out the running ones' grace
  // period to be failed then; it is failed at once (it holds no slot or pages yet).
  if (!accepting_) {
    for (Pending& p : queue_) p.ch->push(failed(kShuttingDown, FailReason::ShuttingDown));
    cancelled += queue_.size();
    in_flight_ -= int64_t(queue_.size());
    queue_.clear();
  }
  running_count_ = int64_t(running_.size() + admitted.size());
  std::lock_guard<std::mutex> ls(stats_mu_);
  stats_.requests_cancelled += cancelled;
  stats_.queued = int64_t(queue_.size());
  stats_.running = int64_t(running_.size() + admitted.size());
  stats_.cache_pages_used = pool_.used_pages();
}

// Finished and cancelled sequences leave: their slots, state and pages are freed now (before admission,
// so that a new request finds them free, and before each step).
void Engine::retire() {
  uint64_t cancelled = 0;
  // The final events go out after the sequences (and their slots) are gone: a client that has read its
  // request's final event finds the engine done with the backend for it.
  std::vector<std::pair<std::shared_ptr<RequestChannel>, EngineEvent>> finals;
  std::erase_if(running_, [&](const std::unique_ptr<Sequence>& s) {
    if (!s->done && !s->ch->cancelled()) return false;
    if (s->final) {
      finals.emplace_back(s->ch, std::move(*s->final));
    } else if (!s->done) {
      finals.emplace_back(s->ch, failed("cancelled", FailReason::Cancelled));
      ++cancelled;
    }
    pool_.release(s->pages);
    --in_flight_;
    return true;
  });
  for (auto& [ch, ev] : finals) ch->push(std::move(ev));
  running_count_ = int64_t(running_.size());
  std::lock_guard<std::mutex> ls(stats_mu_);
  stats_.requests_cancelled += cancelled;
}

// Snapshots in the prefix cache hold KV pages of their rank's pool beside the running sequences; the
// engine's own reservation (pool_) covers only the sequences. Each running sequence may still take the
// pages of its reserved context (prompt + max_new) beyond those of the positions it holds; a fresh one
// (at position 0) all of them (a restored prefix shares pages with its snapshot: counting them again only
// over-reserves). Each rank's pool is its own: a rank short of pages evicts its own snapshots.
void Engine::reclaim_pages(const std::vector<std::unique_ptr<Sequence>>& fresh) {
  for (int r = 0; r < runner_.ranks(); ++r) {
    KvPageInfo info = runner_.kv_pages(r);
    if (info.capacity == 0) continue;  // the pool grows as needed (the CPU's)
    auto pages_of = [&](int64_t tokens) { return info.pages_needed(std::min(tokens, max_context_)); };
    int64_t need = 0;
    auto add = [&](const Sequence& s) {
      if (runner_.rank_of(s.slot) == r)
        need += std::max<int64_t>(0, pages_of(int64_t(s.req.prompt.size()) + s.max_new) - pages_of(runner_.pos(s.slot)));
    };
    for (const auto& s : running_) add(*s);
    for (const auto& s : fresh) add(*s);
    while (info.free_pages() < need && prefix_->evict_oldest(r)) info = runner_.kv_pages(r);
  }
}

// Over data-parallel ranks with the prefix cache: place_sequence (engine_schedule.h) over the ranks'
// loads and the prompt's cached prefix on each. Otherwise -1: the runner's choice (the fewest sequences).
int Engine::place(const std::vector<int32_t>& prompt) const {
  if (!prefix_ || runner_.ranks() == 1) return -1;
  const std::vector<Runner::RankLoad> load = runner_.rank_loads();
  const std::vector<int64_t> hit = prefix_->probe(prompt);
  std::vector<RankRoom> room;
  for (size_t r = 0; r < load.size(); ++r) room.push_back({.held = load[r].held, .slots = load[r].slots, .hit = hit[r]});
  return place_sequence(room);
}

void Engine::run_step(uint64_t step) {
  retire();
  if (running_.empty()) {
    update_gauges(-1);
    return;
  }
  std::vector<SeqDemand> demands;
  for (const auto& s : running_)
    demands.push_back({.prompt_len = int64_t(s->req.prompt.size()),
                       .prefilled = s->prefilled,
                       .cuts = s->prefix ? &s->prefix->points() : nullptr});
  const std::vector<StepItem> plan = plan_step(demands, {opt_.max_step_tokens, opt_.prefill_chunk}, step);

  // The decode tokens of every decoding sequence go through one decode call (the plan puts them
  // first), then the prefill chunks one by one.
  int64_t step_tokens = 0, step_seqs = 0;
  size_t prev_seq = SIZE_MAX;
  std::vector<DecodeItem> batch;
  std::vector<Sequence*> batch_seqs, spec_seqs;
  std::vector<const StepItem*> prefills;
  for (const StepItem& item : plan) {
    Sequence& s = *running_[item.seq];
    if (s.done || s.ch->cancelled()) continue;
    step_tokens += item.tokens();
    if (item.seq != prev_seq) ++step_seqs;
    prev_seq = item.seq;
    if (item.decode && s.speculative) {
      spec_seqs.push_back(&s);
    } else if (item.decode) {
      batch.push_back({s.slot, s.next_token, s.pos});
      batch_seqs.push_back(&s);
    } else {
      prefills.push_back(&item);
    }
  }
  if (!batch.empty()) {
    std::vector<Draw> draws;
    for (Sequence* s : batch_seqs) draws.push_back(s->draw());
    try {
      runner_.decode(batch, draws);
    } catch (const std::exception& e) {
      for (Sequence* s : batch_seqs) conclude(*s, failed(e.what()));
      batch_seqs.clear();
    }
    for (size_t b = 0; b < batch_seqs.size(); ++b) {
      Sequence& s = *batch_seqs[b];
      ++s.pos;
      try {
        take(s, draws[b]);
      } catch (const std::exception& e) {
        conclude(s, failed(e.what()));
      }
    }
  }
  if (!spec_seqs.empty()) speculative_step(spec_seqs);
  for (const StepItem* item : prefills) {
    Sequence& s = *running_[item->seq];
    if (s.done) continue;
    try {
      const auto& p = s.req.prompt;
      std::vector<int32_t> chunk(p.begin() + item->begin, p.begin() + item->end);
      const bool last = item->end == int64_t(p.size());
      Draw d = s.draw();
      if (s.lane && (!last || s.speculative))
        prefill_lane(s, chunk, last, d);
      else if (last)
        runner_.prefill(s.slot, s.pos, chunk, d);
      else
        runner_.feed(s.slot, s.pos, chunk);
      s.pos += int64_t(chunk.size());
      s.prefilled = item->end;
      if (s.prefix && !last) snapshot_prefix(s);
      if (last) take(s, d);
    } catch (const std::exception& e) {
      conclude(s, failed(e.what()));
    }
  }
  {
    std::lock_guard<std::mutex> ls(stats_mu_);
    ++stats_.steps;
    stats_.last_step_tokens = step_tokens;
    stats_.last_step_sequences = step_seqs;
    if (step_seqs > 0) stats_.batch_size.observe(double(step_seqs));
  }
  retire();
  update_gauges(-1);
}

// After a prefill chunk: when it ended at one of the prompt's snapshot points, the slot goes into the
// prefix cache. A snapshot that fails (device memory) leaves the request running, uncached.
void Engine::snapshot_prefix(Sequence& s) {
  try {
    if (s.lane)
      s.prefix->reached(s.req.prompt, s.prefilled, s.lane->mtp_pos,
                        [&] { return std::make_shared<const Tensor>(s.lane->pending); });
    else
      s.prefix->reached(s.req.prompt, s.prefilled);
  } catch (const std::exception&) {
    std::lock_guard<std::mutex> ls(stats_mu_);
    ++stats_.prefix_snapshot_errors;
  }
}

// The chunk through the runner (its pieces); after each piece the lane keeps its streams and feeds the
// MTP block. The prompt's last chunk of a speculative request: its last token alone, whose logits give
// the first token by the lane's draw (as SpeculativeDecoder::start). Over data-parallel ranks all of it
// runs on the sequence's rank (its own slot), the other ranks mirroring each call (Runner::mirrored).
void Engine::prefill_lane(Sequence& s, const std::vector<int32_t>& chunk, bool last, Draw& d) {
  SpeculativeLane& lane = *s.lane;
  if (lane.pos != s.pos) fail("speculative: the lane is at ", lane.pos, ", the sequence at ", s.pos);
  const int slot = runner_.local_slot(s.slot);
  runner_.mirrored(runner_.rank_of(s.slot), [&](Runner& x) {
    Model& m = x.model();
    const int64_t T = int64_t(chunk.size()), lead = last ? T - 1 : T;
    int64_t kept = 0;
    auto keep = [&](int64_t upto) {
      lane.fed(m, m.backend().streams(), std::vector<int32_t>(chunk.begin() + kept, chunk.begin() + upto));
      kept = upto;
    };
    if (lead > 0) {
      x.feed(slot, s.pos, std::vector<int32_t>(chunk.begin(), chunk.begin() + lead), [&](int64_t done, int64_t) {
        keep(done);
        return true;
      });
      keep(lead);
    }
    if (!last) return;
    const Tensor logits = x.prefill(slot, s.pos + lead, {chunk.back()});
    keep(T);
    d.error.clear();
    d.id = lane.first(logits.ptr(), runner_.config().vocab_size);
  });
}

// One round of every speculative sequence's lane (runtime/speculative.h), each allowed the tokens it
// may still generate; the emitted tokens go to the requests one by one (a stop or the limit ends one).
// Over data-parallel ranks, every rank's round at once (Runner::together): each rank's lanes on its own
// model, the ranks' sequences of main and MTP calls (which depend on their lanes) paired into one
// schedule, a rank idling in the steps whose kind it does not need.
void Engine::speculative_step(const std::vector<Sequence*>& seqs) {
  std::vector<SpeculativeStats> before;
  for (Sequence* s : seqs) before.push_back(s->lane->stats);
  std::vector<std::vector<int32_t>> out(seqs.size());
  std::vector<std::string> errors(size_t(runner_.ranks()));  // per rank: its round's failure
  std::vector<char> ok(seqs.size(), 1);
  auto round = [&](int r, Runner& x) {
    std::vector<size_t> mine;
    for (size_t i = 0; i < seqs.size(); ++i)
      if (runner_.rank_of(seqs[i]->slot) == r) mine.push_back(i);
    if (mine.empty()) return;
    std::vector<SpeculativeLane*> lanes;
    std::vector<int64_t> limits;
    for (size_t i : mine) {
      lanes.push_back(&*seqs[i]->lane);
      limits.push_back(seqs[i]->max_new - seqs[i]->generated);
    }
    try {
      std::vector<std::vector<int32_t>> got = speculative_round(x.model(), lanes, limits);
      for (size_t j = 0; j < mine.size(); ++j) out[mine[j]] = std::move(got[j]);
    } catch (const std::exception& e) {
      errors[size_t(r)] = e.what();
      if (errors[size_t(r)].empty()) errors[size_t(r)] = "speculative round failed";
    }
  };
  try {
    runner_.together(round);
  } catch (const std::exception& e) {  // an idle rank's call failed (the collectives): every round with it
    for (std::string& err : errors)
      if (err.empty()) err = e.what();
  }
  for (size_t i = 0; i < seqs.size(); ++i) {
    const std::string& e = errors[size_t(runner_.rank_of(seqs[i]->slot))];
    if (e.empty()) continue;
    conclude(*seqs[i], failed(e));
    ok[i] = 0;
  }
  {
    std::lock_guard<std::mutex> ls(stats_mu_);
    for (size_t i = 0; i < seqs.size(); ++i) {
      if (!ok[i]) continue;
      const SpeculativeStats& a = before[i];
      const SpeculativeStats& b = seqs[i]->lane->stats;
      stats_.spec_verify_steps += uint64_t(b.rounds - a.rounds);
      stats_.spec_draft_tokens += uint64_t(b.proposed - a.proposed);
      stats_.spec_accepted_tokens += uint64_t(b.accepted - a.accepted);
      stats_.spec_tokens += uint64_t(b.emitted - a.emitted);
      stats_.spec_plain_steps += uint64_t(b.plain_steps - a.plain_steps);
    }
  }
  for (size_t i = 0; i < seqs.size(); ++i) {
    if (!ok[i]) continue;
    Sequence& s = *seqs[i];
    try {
      s.pos = s.lane->pos;
      runner_.resume_at(s.slot, s.pos);
      for (int32_t id : out[i]) {
        if (s.done) break;
        Draw d;
        d.id = id;
        take(s, d);
      }
    } catch (const std::exception& e) {
      if (!s.done) conclude(s, failed(e.what()));
    }
  }
}

void Engine::take(Sequence& s, Draw& d) {
  if (!d.error.empty()) {
    conclude(s, failed(d.error));
    return;
  }
  const int32_t id = d.id;
  const auto now = Clock::now();
  const auto& stop_ids = s.req.stop.stop_ids;
  const bool stop = std::find(stop_ids.begin(), stop_ids.end(), id) != stop_ids.end();
  {
    // Counted before the event goes out: a client that sees the token sees it in the metrics.
    std::lock_guard<std::mutex> ls(stats_mu_);
    if (s.last_token == Clock::time_point{}) {
      stats_.ttft.observe(seconds(now - s.arrived));
      stats_.prompt_tokens += uint64_t(s.req.prompt.size());
    } else {
      stats_.inter_token.observe(seconds(now - s.last_token));
    }
    if (!stop) ++stats_.generated_tokens;
  }
  s.last_token = now;
  if (stop) {
    finish(s, FinishReason::Stop, id);
    return;
  }
  ++s.generated;
  s.history.push_back(id);
  EngineEvent ev;
  ev.kind = EngineEvent::Kind::Token;
  ev.id = id;
  ev.has_logprobs = s.req.top_logprobs >= 0;
  if (ev.has_logprobs) ev.logprobs = std::move(d.logprobs);
  ev.text = s.filter.push(s.dec.push(id));
  s.ch->push(std::move(ev));
  if (s.filter.stopped())
    finish(s, FinishReason::Stop, -1);
  else if (s.generated >= s.max_new)
    finish(s, FinishReason::Length, -1);
  else
    s.next_token = id;
}

void Engine::finish(Sequence& s, FinishReason why, int32_t stop_id) {
  EngineEvent ev;
  ev.kind = EngineEvent::Kind::Finished;
  if (!s.filter.stopped()) {
    ev.text = s.filter.push(s.dec.flush());
    ev.text += s.filter.flush();
    if (s.filter.stopped()) why = FinishReason::Stop;
  }
  ev.finish = why;
  ev.stop_id = stop_id;
  ev.prompt_tokens = int64_t(s.req.prompt.size());
  ev.completion_tokens = s.generated;
  ev.cached_tokens = s.prefix ? s.prefix->start() : 0;
  {
    std::lock_guard<std::mutex> ls(stats_mu_);
    ++(why == FinishReason::Stop ? stats_.finished_stop : stats_.finished_length);
    stats_.request_latency.observe(seconds(Clock::now() - s.arrived));
  }
  conclude(s, std::move(ev));
}

void Engine::conclude(Sequence& s, EngineEvent ev) {
  pool_.release(s.pages);
  s.pages = 0;
  s.done = true;
  {
    std::lock_guard<std::mutex> ls(stats_mu_);
    --stats_.running;
    stats_.cache_pages_used = pool_.used_pages();
  }
  s.final = std::move(ev);  // pushed by retire(), after the slot is released
}

void Engine::fail_all(std::deque<Pending>& queued) {
  uint64_t n = 0;
  for (Pending& p : queued) {
    p.ch->push(failed(kShuttingDown, FailReason::ShuttingDown));
    ++n;
  }
  std::vector<std::pair<std::shared_ptr<RequestChannel>, EngineEvent>> finals;
  for (auto& s : running_) {
    if (s->final) {
      finals.emplace_back(s->ch, std::move(*s->final));
    } else if (!s->done) {
      finals.emplace_back(s->ch, failed(kShuttingDown, FailReason::ShuttingDown));
      ++n;
    }
    pool_.release(s->pages);
  }
  running_.clear();  // the slots are released before the requests hear of it
  for (auto& [ch, ev] : finals) ch->push(std::move(ev));
  running_count_ = 0;
  in_flight_ = 0;
  std::lock_guard<std::mutex> ls(stats_mu_);
  stats_.requests_cancelled += n;
  stats_.queued = 0;
  stats_.running = 0;
  stats_.cache_pages_used = pool_.used_pages();
}

// queued < 0: leave the queue gauge as admit() set it.
void Engine::update_gauges(int64_t queued) {
  std::lock_guard<std::mutex> ls(stats_mu_);
  if (queued >= 0) stats_.queued = queued;
  stats_.running = int64_t(running_.size());
  stats_.cache_pages_used = pool_.used_pages();
  stats_.cache_pages_total = pool_.total_pages();
  stats_.cache_page_tokens = pool_.page_tokens();
}

}  // namespace dsv4
