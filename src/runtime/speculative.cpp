#include "runtime/speculative.h"

#include <algorithm>
#include <cstring>

#include "core/error.h"
#include "core/philox.h"

namespace dsv4 {

namespace {

enum Purpose : uint64_t { kDraft = 0, kAccept = 1, kTarget = 2 };

Batch run_batch(int slot, int64_t pos, const int32_t* ids, int64_t n) {
  Batch b;
  b.ids.assign(ids, ids + n);
  b.positions.resize(size_t(n));
  for (int64_t t = 0; t < n; ++t) b.positions[size_t(t)] = int32_t(pos + t);
  b.slots.assign(size_t(n), slot);
  b.run_len = n;
  return b;
}

// Rows [r0, r1) of a [T, n, D] tensor.
Tensor rows_of(const Tensor& S, int64_t r0, int64_t r1) {
  const int64_t w = S.numel() / S.dim(0);
  Tensor out({r1 - r0, S.dim(1), S.dim(2)});
  std::memcpy(out.ptr(), S.ptr() + r0 * w, size_t((r1 - r0) * w) * sizeof(float));
  return out;
}

void check_options(const Model& m, int slot, const SpeculativeOptions& o) {
  if (m.num_mtp() < 1) fail("speculative decoding needs an MTP block; the model has none (num_nextn_predict_layers 0)");
  if (o.drafts < 1 || o.drafts > 3) fail("speculative: drafts per step must be 1 to 3, got ", o.drafts);
  if (o.drafts >= 2 && (o.scratch_slot < 0 || o.scratch_slot == slot))
    fail("speculative: ", o.drafts, " drafts per step need a scratch slot other than the sequence's ", slot);
  const SamplingParams& p = o.sampling;
  if (!(p.temperature >= 0)) fail("speculative: temperature must be >= 0, got ", p.temperature);
  if (p.top_k < 0) fail("speculative: top-k must be >= 0, got ", p.top_k);
  if (!(p.top_p > 0 && p.top_p <= 1)) fail("speculative: top-p must be in (0, 1], got ", p.top_p);
  if (!(p.min_p >= 0 && p.min_p <= 1)) fail("speculative: min-p must be in [0, 1], got ", p.min_p);
  if (p.repetition_penalty != 1 || p.presence_penalty != 0 || p.frequency_penalty != 0)
    fail("speculative decoding takes no repetition / presence / frequency penalty");
  if (p.grammar.grammar) fail("speculative decoding takes no grammar (structured output)");
  const int64_t need = o.drafts + 1;
  if (m.backend().capacity().max_tokens < need || m.backend().max_logit_rows() < need)
    fail("speculative: a verify step of ", need, " tokens does not fit the backend's calls (", m.backend().name(), ")");
}

}  // namespace

SpeculativeDecoder::SpeculativeDecoder(Model& model, int slot, SpeculativeOptions o)
    : m_(model), be_(model.backend()), slot_(slot), o_(std::move(o)) {
  check_options(m_, slot_, o_);
  stats_.proposed_at.assign(size_t(o_.drafts), 0);
  stats_.accepted_at.assign(size_t(o_.drafts), 0);
}

double SpeculativeDecoder::uniform(uint64_t g, uint64_t purpose) const {
  return philox_uniform(o_.sampling.seed, 4 * g + purpose);
}

int32_t SpeculativeDecoder::draw_target(const TokenDistribution& p, uint64_t g) const {
  return draw_token(p, uniform(g, kTarget));
}

Tensor SpeculativeDecoder::feed_main(int slot, int64_t pos, const std::vector<int32_t>& ids, int64_t head_rows) {
  const Batch b = run_batch(slot, pos, ids.data(), int64_t(ids.size()));
  m_.step(b, {.head_first = 0, .head_rows = head_rows});
  return be_.streams();
}

void SpeculativeDecoder::append_pending(const Tensor& S, int64_t r0, int64_t r1, const std::vector<int32_t>& ids) {
  const Tensor part = rows_of(S, r0, r1);
  if (pending_.data.empty()) {
    pending_ = part;
  } else {
    pending_.data.insert(pending_.data.end(), part.data.begin(), part.data.end());
    pending_.shape[0] += part.dim(0);
  }
  fed_tail_.insert(fed_tail_.end(), ids.begin() + r0, ids.begin() + r1);
}

// The MTP block over the first `rows` pending positions: row r is position mtp_pos_ + r with streams
// S_{M+r} and the id that follows it (the next fed id, or x_N for the last fed position).
void SpeculativeDecoder::feed_mtp(int64_t rows, bool head) {
  if (rows <= 0) return;
  const int64_t chunk = be_.capacity().max_tokens;
  std::vector<int32_t> next(static_cast<size_t>(rows));
  for (int64_t r = 0; r < rows; ++r)
    next[size_t(r)] = size_t(r + 1) < fed_tail_.size() ? fed_tail_[size_t(r + 1)] : current_;
  for (int64_t r0 = 0; r0 < rows; r0 += chunk) {
    const int64_t n = std::min(chunk, rows - r0);
    m_.step_mtp(run_batch(slot_, mtp_pos_ + r0, next.data() + r0, n), rows_of(pending_, r0, r0 + n), 0);
  }
  if (head) be_.head(1, rows - (rows - 1) / chunk * chunk - 1, 1);  // the last row of the last call
  const int64_t left = pending_.dim(0) - rows;
  pending_ = left > 0 ? rows_of(pending_, rows, pending_.dim(0)) : Tensor();
  fed_tail_.erase(fed_tail_.begin(), fed_tail_.begin() + rows);
  mtp_pos_ += rows;
}

int32_t SpeculativeDecoder::start(const std::vector<int32_t>& prompt) {
  const int64_t P = int64_t(prompt.size());
  if (P == 0) fail("speculative: an empty prompt");
  if (P >= be_.capacity().max_ctx)
    fail("the prompt of ", P, " tokens leaves no room in the context of ", be_.capacity().max_ctx);
  pos_ = mtp_pos_ = 0;
  generated_ = 0;
  pending_ = Tensor();
  fed_tail_.clear();
  const int64_t chunk = be_.capacity().max_tokens;
  Tensor logits;
  for (int64_t c0 = 0; c0 < P; c0 += chunk) {
    const int64_t n = std::min(chunk, P - c0);
    const bool last = c0 + n == P;
    const Batch b = run_batch(slot_, c0, prompt.data() + c0, n);
    m_.step(b, {.head_first = last ? n - 1 : 0, .head_rows = last ? 1 : 0});
    if (last) logits = be_.logits(1);
    append_pending(be_.streams(), 0, n, b.ids);
    pos_ += n;
    // Every pending position but the last has its next id now.
    feed_mtp(pending_.dim(0) - 1, false);
  }
  current_ = draw_target(sampling_distribution(logits.ptr(), m_.config().vocab_size, o_.sampling), 0);
  generated_ = 1;
  return current_;
}

std::vector<int32_t> SpeculativeDecoder::plain_step() {
  const std::vector<int32_t> ids{current_};
  const Tensor S = feed_main(slot_, pos_, ids, 1);
  const Tensor logits = be_.logits(1);
  append_pending(S, 0, 1, ids);
  ++pos_;
  current_ = draw_target(sampling_distribution(logits.ptr(), m_.config().vocab_size, o_.sampling), generated_);
  ++generated_;
  ++stats_.plain_steps;
  return {current_};
}

std::vector<int32_t> SpeculativeDecoder::round(int64_t max_new) {
  if (current_ < 0) fail("speculative: round() before start()");
  if (max_new < 1) fail("speculative: a round must be allowed at least one token, got ", max_new);
  const int64_t room = be_.capacity().max_ctx - pos_;
  if (room < 1) fail("the sequence would reach ", pos_ + 1, " positions; this model holds ", be_.capacity().max_ctx);
  const int64_t k = std::min({o_.drafts, max_new - 1, room - 1});
  if (k == 0) return plain_step();
  const int64_t V = m_.config().vocab_size, N = pos_;
  const uint64_t g0 = generated_;  // the generated index draft 1 stands for
  if (pending_.data.empty() || pending_.dim(0) != N - mtp_pos_ || int64_t(fed_tail_.size()) != N - mtp_pos_)
    fail("speculative: the MTP block is at ", mtp_pos_, " with ", fed_tail_.size(), " pending positions, the main model at ", N);

  // 1. MTP catch-up over M .. N-1; its last row drafts d_1.
  feed_mtp(pending_.dim(0), true);
  std::vector<Draft> drafts;
  {
    const Tensor l = be_.logits(1);
    TokenDistribution q = sampling_distribution(l.ptr(), V, o_.sampling);
    const int32_t d = draw_token(q, uniform(g0, kDraft));
    drafts.push_back({d, std::move(q)});
  }
  const Tensor X = be_.streams();
  Tensor H = rows_of(X, X.dim(0) - 1, X.dim(0));

  // 2. The slot as the round found it (main and MTP at N).
  const auto snap = be_.snapshot(slot_, N, mtp_pos_);

  // 3. Drafts 2..k: the MTP block on its own output streams, in the scratch slot.
  if (k >= 2) be_.restore(o_.scratch_slot, *snap);
  for (int64_t j = 2; j <= k; ++j) {
    const int32_t prev = drafts.back().id;
    m_.step_mtp(run_batch(o_.scratch_slot, N + j - 2, &prev, 1), H, 0);
    H = be_.streams();
    be_.head(1, 0, 1);
    const Tensor l = be_.logits(1);
    TokenDistribution q = sampling_distribution(l.ptr(), V, o_.sampling);
    const int32_t d = draw_token(q, uniform(g0 + uint64_t(j) - 1, kDraft));
    drafts.push_back({d, std::move(q)});
  }

  // 4. Verify: x_N, d_1 .. d_k in one main call.
  std::vector<int32_t> ids{current_};
  for (const Draft& d : drafts) ids.push_back(d.id);
  const Tensor S = feed_main(slot_, N, ids, k + 1);
  const Tensor logits = be_.logits(k + 1);

  // 5. Accept the longest prefix the rule keeps, then one token of the target.
  std::vector<int32_t> out;
  auto stopped = [&] { return std::find(o_.stop_ids.begin(), o_.stop_ids.end(), out.back()) != o_.stop_ids.end(); };
  int64_t a = 0;
  for (int64_t j = 1; j <= k; ++j) {
    const uint64_t g = g0 + uint64_t(j) - 1;
    const TokenDistribution p = sampling_distribution(logits.row(j - 1), V, o_.sampling);
    const DraftVerdict v = judge_draft(p, drafts[size_t(j - 1)].q, drafts[size_t(j - 1)].id, uniform(g, kAccept),
                                       uniform(g, kTarget));
    out.push_back(v.token);
    if (!v.accepted) break;
    ++a;
    ++stats_.accepted_at[size_t(j - 1)];
    if (stopped()) break;
  }
  if (a == k && !stopped())
    out.push_back(draw_target(sampling_distribution(logits.row(k), V, o_.sampling), g0 + uint64_t(k)));
  stats_.proposed += k;
  for (int64_t j = 1; j <= k; ++j) ++stats_.proposed_at[size_t(j - 1)];
  stats_.accepted += a;

  // 6. The slot as if x_N and the emitted tokens but the last had been fed one by one.
  std::vector<int32_t> fed{current_};
  fed.insert(fed.end(), out.begin(), out.end() - 1);
  const int64_t f = int64_t(fed.size());
  if (f == k + 1) {
    append_pending(S, 0, f, fed);
  } else {
    be_.restore(slot_, *snap);
    append_pending(feed_main(slot_, N, fed, 0), 0, f, fed);
    ++stats_.refeeds;
  }
  pos_ = N + f;
  current_ = out.back();
  generated_ += out.size();
  ++stats_.rounds;
  stats_.emitted += int64_t(out.size());
  return out;
}

std::vector<int32_t> SpeculativeDecoder::generate(const std::vector<int32_t>& prompt, int64_t n) {
  std::vector<int32_t> out;
  if (n < 1) return out;
  out.push_back(start(prompt));
  auto is_stop = [&](int32_t id) { return std::find(o_.stop_ids.begin(), o_.stop_ids.end(), id) != o_.stop_ids.end(); };
  while (int64_t(out.size()) < n && !is_stop(out.back()) && pos_ < be_.capacity().max_ctx) {
    const std::vector<int32_t> r = round(n - int64_t(out.size()));
    out.insert(out.end(), r.begin(), r.end());
  }
  return out;
}

SpeculativeState SpeculativeDecoder::save() {
  return {.slot = be_.snapshot(slot_, pos_, mtp_pos_), .pos = pos_, .mtp_pos = mtp_pos_, .current = current_,
          .generated = generated_, .pending = pending_, .fed_tail = fed_tail_};
}

void SpeculativeDecoder::resume(const SpeculativeState& s) {
  if (!s.slot) fail("speculative: resume from an empty state");
  be_.restore(slot_, *s.slot);
  pos_ = s.pos;
  mtp_pos_ = s.mtp_pos;
  current_ = s.current;
  generated_ = s.generated;
  pending_ = s.pending;
  fed_tail_ = s.fed_tail;
}

}  // namespace dsv4
