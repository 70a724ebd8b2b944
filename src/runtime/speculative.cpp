#include "runtime/speculative.h"

#include <algorithm>
#include <cstring>
#include <map>

#include "core/error.h"
#include "core/philox.h"

namespace dsv4 {

namespace {

enum Purpose : uint64_t { kDraft = 0, kAccept = 1, kTarget = 2 };

// Rows [r0, r1) of a [T, n, D] tensor.
Tensor rows_of(const Tensor& S, int64_t r0, int64_t r1) {
  const int64_t w = S.numel() / S.dim(0);
  Tensor out({r1 - r0, S.dim(1), S.dim(2)});
  std::memcpy(out.ptr(), S.ptr() + r0 * w, size_t((r1 - r0) * w) * sizeof(float));
  return out;
}

void append_rows(Tensor& to, const Tensor& part) {
  if (part.numel() == 0) return;
  if (to.data.empty()) {
    to = part;
  } else {
    to.data.insert(to.data.end(), part.data.begin(), part.data.end());
    to.shape[0] += part.dim(0);
  }
}

// One call's runs: run r is `ids[r]` at positions pos[r].. of slot slots[r] (every run of one length).
struct Runs {
  Batch b;
  Tensor S;  // MTP calls: the input streams, run after run
  void add(int slot, int64_t pos, const int32_t* ids, int64_t n) {
    for (int64_t t = 0; t < n; ++t) {
      b.ids.push_back(ids[t]);
      b.positions.push_back(int32_t(pos + t));
      b.slots.push_back(slot);
    }
    b.run_len = n;
  }
};

// `items` cut into calls of at most `per_call` items each (at least one).
template <class F>
void in_calls(const std::vector<size_t>& items, int64_t per_call, F call) {
  per_call = std::max<int64_t>(1, per_call);
  for (size_t i0 = 0; i0 < items.size(); i0 += size_t(per_call)) {
    const size_t i1 = std::min(items.size(), i0 + size_t(per_call));
    call(std::vector<size_t>(items.begin() + long(i0), items.begin() + long(i1)));
  }
}

}  // namespace

bool speculative_sampling_ok(const SamplingParams& p) {
  return p.repetition_penalty == 1 && p.presence_penalty == 0 && p.frequency_penalty == 0 && !p.grammar.grammar;
}

void check_speculative(const Model& m, const SpeculativeOptions& o) {
  if (m.num_mtp() < 1) fail("speculative decoding needs an MTP block; the model has none (num_nextn_predict_layers 0)");
  if (o.drafts < 1 || o.drafts > 3) fail("speculative: drafts per step must be 1 to 3, got ", o.drafts);
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

void SpeculativeStats::add(const SpeculativeStats& o) {
  rounds += o.rounds;
  plain_steps += o.plain_steps;
  proposed += o.proposed;
  accepted += o.accepted;
  emitted += o.emitted;
  refeeds += o.refeeds;
  if (proposed_at.size() < o.proposed_at.size()) proposed_at.resize(o.proposed_at.size(), 0);
  if (accepted_at.size() < o.accepted_at.size()) accepted_at.resize(o.accepted_at.size(), 0);
  for (size_t j = 0; j < o.proposed_at.size(); ++j) proposed_at[j] += o.proposed_at[j];
  for (size_t j = 0; j < o.accepted_at.size(); ++j) accepted_at[j] += o.accepted_at[j];
}

// ---- a lane

SpeculativeLane::SpeculativeLane(int slot_, SpeculativeOptions o_) : slot(slot_), o(std::move(o_)) {
  stats.proposed_at.assign(size_t(std::max<int64_t>(0, o.drafts)), 0);
  stats.accepted_at.assign(size_t(std::max<int64_t>(0, o.drafts)), 0);
}

double SpeculativeLane::uniform(uint64_t g, uint64_t purpose) const { return philox_uniform(o.sampling.seed, 4 * g + purpose); }

namespace {

// The MTP block over the first `rows` pending positions of `l`, one lane alone (in calls of the
// backend's size): row r is position M + r with streams S_{M+r} and the id that follows it (the next
// fed id, or x_N for the last fed position).
void feed_mtp_alone(Model& m, SpeculativeLane& l, int64_t rows) {
  if (rows <= 0) return;
  const int64_t chunk = m.backend().capacity().max_tokens;
  std::vector<int32_t> next(static_cast<size_t>(rows));
  for (int64_t r = 0; r < rows; ++r)
    next[size_t(r)] = size_t(r + 1) < l.fed_tail.size() ? l.fed_tail[size_t(r + 1)] : l.current;
  for (int64_t r0 = 0; r0 < rows; r0 += chunk) {
    const int64_t n = std::min(chunk, rows - r0);
    Runs c;
    c.add(l.slot, l.mtp_pos + r0, next.data() + r0, n);
    m.step_mtp(c.b, rows_of(l.pending, r0, r0 + n), 0);
  }
  const int64_t left = l.pending.dim(0) - rows;
  l.pending = left > 0 ? rows_of(l.pending, rows, l.pending.dim(0)) : Tensor();
  l.fed_tail.erase(l.fed_tail.begin(), l.fed_tail.begin() + rows);
  l.mtp_pos += rows;
}

}  // namespace

void SpeculativeLane::fed(Model& m, const Tensor& S, const std::vector<int32_t>& ids) {
  append_rows(pending, S);
  fed_tail.insert(fed_tail.end(), ids.begin(), ids.end());
  pos += int64_t(ids.size());
  feed_mtp_alone(m, *this, pending.dim(0) - 1);  // every pending position but the last has its next id
}

int32_t SpeculativeLane::first(const float* logits, int64_t vocab) {
  current = draw_token(sampling_distribution(logits, vocab, o.sampling), uniform(0, kTarget));
  generated = 1;
  return current;
}

void SpeculativeLane::resume_prefill(const std::vector<int32_t>& tokens, int64_t mtp_pos_, const Tensor& pending_) {
  const int64_t P = int64_t(tokens.size());
  const int64_t kept = pending_.numel() ? pending_.dim(0) : 0;
  if (mtp_pos_ < 0 || mtp_pos_ > P || kept != P - mtp_pos_)
    fail("speculative: a restored state at ", P, " with the MTP block at ", mtp_pos_, " and ", kept, " kept streams");
  pos = P;
  mtp_pos = mtp_pos_;
  pending = pending_;
  fed_tail.assign(tokens.begin() + mtp_pos_, tokens.end());
  current = -1;
  generated = 0;
}

// ---- a round over lanes

std::vector<std::vector<int32_t>> speculative_round(Model& m, const std::vector<SpeculativeLane*>& lanes,
                                                    const std::vector<int64_t>& max_new) {
  Backend& be = m.backend();
  const int64_t V = m.config().vocab_size, ctx = be.capacity().max_ctx;
  const int64_t call_tokens = be.capacity().max_tokens, call_rows = be.max_logit_rows();
  const size_t L = lanes.size();
  if (max_new.size() != L) fail("speculative: ", L, " lanes and ", max_new.size(), " limits");

  struct Draft {
    int32_t id;
    TokenDistribution q;
  };
  struct Work {
    int64_t k = 0, N = 0;
    uint64_t g0 = 0;
    std::vector<Draft> drafts;
    Tensor H;  // the last MTP row's output streams [1, n, D]
    std::shared_ptr<const SlotSnapshot> snap;
    std::vector<int32_t> out, fed;
  };
  std::vector<Work> w(L);
  std::vector<size_t> drafting;  // lanes with k >= 1
  int64_t K = 0;
  for (size_t i = 0; i < L; ++i) {
    SpeculativeLane& l = *lanes[i];
    if (l.current < 0) fail("speculative: a round before the first token");
    if (max_new[i] < 1) fail("speculative: a round must be allowed at least one token, got ", max_new[i]);
    const int64_t room = ctx - l.pos;
    if (room < 1) fail("the sequence would reach ", l.pos + 1, " positions; this model holds ", ctx);
    w[i].k = std::min({l.o.drafts, max_new[i] - 1, room - 1});
    w[i].N = l.pos;
    w[i].g0 = l.generated;
    if (w[i].k == 0) continue;
    if (l.pending.data.empty() || l.pending.dim(0) != l.pos - l.mtp_pos || int64_t(l.fed_tail.size()) != l.pos - l.mtp_pos)
      fail("speculative: the MTP block is at ", l.mtp_pos, " with ", l.fed_tail.size(),
           " pending positions, the main model at ", l.pos);
    drafting.push_back(i);
    K = std::max(K, w[i].k);
  }

  // 1. MTP catch-up over M .. N-1. The rows but the last, by their number (one call per number); a
  // lane whose rows exceed a call goes alone.
  {
    std::map<int64_t, std::vector<size_t>> by_rows;
    for (size_t i : drafting)
      if (int64_t r = lanes[i]->pending.dim(0) - 1; r > 0) {
        if (r > call_tokens)
          feed_mtp_alone(m, *lanes[i], r);
        else
          by_rows[r].push_back(i);
      }
    for (auto& [r, group] : by_rows)
      in_calls(group, call_tokens / r, [&](const std::vector<size_t>& part) {
        Runs c;
        for (size_t i : part) {
          SpeculativeLane& l = *lanes[i];
          std::vector<int32_t> next(l.fed_tail.begin() + 1, l.fed_tail.begin() + 1 + r);
          c.add(l.slot, l.mtp_pos, next.data(), r);
          append_rows(c.S, rows_of(l.pending, 0, r));
        }
        m.step_mtp(c.b, c.S, 0);
        for (size_t i : part) {
          SpeculativeLane& l = *lanes[i];
          l.pending = rows_of(l.pending, r, l.pending.dim(0));
          l.fed_tail.erase(l.fed_tail.begin(), l.fed_tail.begin() + r);
          l.mtp_pos += r;
        }
      });
  }
  // Draft depth j of the lanes `part` (j = 1: the catch-up's last row, S_{N-1} and x_N at N-1; j >= 2:
  // the block on its own output streams H_{j-1} and d_{j-1} at N+j-2): one MTP call of run length 1
  // with the head, q_j and d_j ~ q_j for each lane, its output streams H_j.
  auto draft_depth = [&](int64_t j, const std::vector<size_t>& part) {
    Runs c;
    for (size_t i : part) {
      SpeculativeLane& l = *lanes[i];
      c.add(l.slot, j == 1 ? l.mtp_pos : w[i].N + j - 2, j == 1 ? &l.current : &w[i].drafts.back().id, 1);
      append_rows(c.S, j == 1 ? l.pending : w[i].H);
    }
    m.step_mtp(c.b, c.S, 0);
    be.head(1, 0, int64_t(part.size()));
    const Tensor lg = be.logits(int64_t(part.size()));
    const Tensor X = be.streams();
    for (size_t b = 0; b < part.size(); ++b) {
      SpeculativeLane& l = *lanes[part[b]];
      Work& wk = w[part[b]];
      TokenDistribution q = sampling_distribution(lg.row(int64_t(b)), V, l.o.sampling);
      const int32_t d = draw_token(q, l.uniform(wk.g0 + uint64_t(j) - 1, kDraft));
      wk.drafts.push_back({d, std::move(q)});
      wk.H = rows_of(X, int64_t(b), int64_t(b) + 1);
      if (j == 1) {  // the MTP block is at N now
        l.pending = Tensor();
        l.fed_tail.clear();
        l.mtp_pos = l.pos;
      }
    }
  };
  in_calls(drafting, std::min(call_tokens, call_rows), [&](const std::vector<size_t>& part) { draft_depth(1, part); });

  // 2. Each drafting lane's slot as the round found it (main and MTP at N).
  for (size_t i : drafting) w[i].snap = be.snapshot(lanes[i]->slot, w[i].N, lanes[i]->mtp_pos);

  // 3. Drafts 2..k, depth j for every lane drafting j, in its own slot; then the slots that drafted go
  // back to the snapshot.
  for (int64_t j = 2; j <= K; ++j) {
    std::vector<size_t> at_j;
    for (size_t i : drafting)
      if (w[i].k >= j) at_j.push_back(i);
    in_calls(at_j, std::min(call_tokens, call_rows), [&](const std::vector<size_t>& part) { draft_depth(j, part); });
  }
  for (size_t i : drafting)
    if (w[i].k >= 2) be.restore(lanes[i]->slot, *w[i].snap);

  // 4. Verify: x_N, d_1 .. d_k of each lane, lanes grouped by k (k = 0: a plain decode step); 5. judge.
  std::map<int64_t, std::vector<size_t>> by_k;
  for (size_t i = 0; i < L; ++i) by_k[w[i].k].push_back(i);
  for (auto& [k, group] : by_k)
    in_calls(group, std::min(call_tokens, call_rows) / (k + 1), [&](const std::vector<size_t>& part) {
      Runs c;
      for (size_t i : part) {
        std::vector<int32_t> ids{lanes[i]->current};
        for (const Draft& d : w[i].drafts) ids.push_back(d.id);
        c.add(lanes[i]->slot, w[i].N, ids.data(), k + 1);
      }
      const int64_t T = c.b.size();
      m.step(c.b, {.head_first = 0, .head_rows = T});
      const Tensor logits = be.logits(T);
      const Tensor X = be.streams();
      for (size_t b = 0; b < part.size(); ++b) {
        SpeculativeLane& l = *lanes[part[b]];
        Work& wk = w[part[b]];
        const int64_t r0 = int64_t(b) * (k + 1);
        auto& out = wk.out;
        auto stopped = [&] { return std::find(l.o.stop_ids.begin(), l.o.stop_ids.end(), out.back()) != l.o.stop_ids.end(); };
        int64_t a = 0;
        for (int64_t j = 1; j <= k; ++j) {
          const uint64_t g = wk.g0 + uint64_t(j) - 1;
          const TokenDistribution p = sampling_distribution(logits.row(r0 + j - 1), V, l.o.sampling);
          const Draft& d = wk.drafts[size_t(j - 1)];
          const DraftVerdict v = judge_draft(p, d.q, d.id, l.uniform(g, kAccept), l.uniform(g, kTarget));
          out.push_back(v.token);
          if (!v.accepted) break;
          ++a;
          ++l.stats.accepted_at[size_t(j - 1)];
          if (stopped()) break;
        }
        if (a == k && (k == 0 || !stopped())) {
          const TokenDistribution p = sampling_distribution(logits.row(r0 + k), V, l.o.sampling);
          out.push_back(draw_token(p, l.uniform(wk.g0 + uint64_t(k), kTarget)));
        }
        wk.fed = {l.current};
        wk.fed.insert(wk.fed.end(), out.begin(), out.end() - 1);
        if (k == 0) {
          ++l.stats.plain_steps;
        } else {
          l.stats.proposed += k;
          for (int64_t j = 1; j <= k; ++j) ++l.stats.proposed_at[size_t(j - 1)];
          l.stats.accepted += a;
          ++l.stats.rounds;
          l.stats.emitted += int64_t(out.size());
        }
        // All fed tokens are the emitted ones: the verify's state stands (its streams are kept).
        if (int64_t(wk.fed.size()) == k + 1) append_rows(l.pending, rows_of(X, r0, r0 + k + 1));
      }
    });

  // 6. Lanes that rejected a draft: the slot back to the snapshot, x_N and the accepted tokens fed
  // again without a head, lanes grouped by how many.
  std::map<int64_t, std::vector<size_t>> refeed;
  for (size_t i : drafting)
    if (int64_t(w[i].fed.size()) < w[i].k + 1) {
      be.restore(lanes[i]->slot, *w[i].snap);
      refeed[int64_t(w[i].fed.size())].push_back(i);
    }
  for (auto& [f, group] : refeed)
    in_calls(group, call_tokens / f, [&](const std::vector<size_t>& part) {
      Runs c;
      for (size_t i : part) c.add(lanes[i]->slot, w[i].N, w[i].fed.data(), f);
      m.step(c.b, {.head_first = 0, .head_rows = 0});
      const Tensor X = be.streams();
      for (size_t b = 0; b < part.size(); ++b) {
        append_rows(lanes[part[b]]->pending, rows_of(X, int64_t(b) * f, int64_t(b + 1) * f));
        ++lanes[part[b]]->stats.refeeds;
      }
    });

  std::vector<std::vector<int32_t>> emitted(L);
  for (size_t i = 0; i < L; ++i) {
    SpeculativeLane& l = *lanes[i];
    l.fed_tail.insert(l.fed_tail.end(), w[i].fed.begin(), w[i].fed.end());
    l.pos = w[i].N + int64_t(w[i].fed.size());
    l.current = w[i].out.back();
    l.generated += w[i].out.size();
    emitted[i] = std::move(w[i].out);
  }
  return emitted;
}

// ---- one sequence

SpeculativeDecoder::SpeculativeDecoder(Model& model, int slot, SpeculativeOptions o) : m_(model), lane_(slot, std::move(o)) {
  check_speculative(m_, lane_.o);
}

int32_t SpeculativeDecoder::start(const std::vector<int32_t>& prompt) {
  Backend& be = m_.backend();
  const int64_t P = int64_t(prompt.size());
  if (P == 0) fail("speculative: an empty prompt");
  if (P >= be.capacity().max_ctx)
    fail("the prompt of ", P, " tokens leaves no room in the context of ", be.capacity().max_ctx);
  lane_.resume_prefill({}, 0, Tensor());
  const int64_t chunk = be.capacity().max_tokens;
  Tensor logits;
  for (int64_t c0 = 0; c0 < P; c0 += chunk) {
    const int64_t n = std::min(chunk, P - c0);
    const bool last = c0 + n == P;
    Runs c;
    c.add(lane_.slot, c0, prompt.data() + c0, n);
    m_.step(c.b, {.head_first = last ? n - 1 : 0, .head_rows = last ? 1 : 0});
    if (last) logits = be.logits(1);
    lane_.fed(m_, be.streams(), c.b.ids);
  }
  return lane_.first(logits.ptr(), m_.config().vocab_size);
}

std::vector<int32_t> SpeculativeDecoder::round(int64_t max_new) {
  return speculative_round(m_, {&lane_}, {max_new})[0];
}

std::vector<int32_t> SpeculativeDecoder::generate(const std::vector<int32_t>& prompt, int64_t n) {
  std::vector<int32_t> out;
  if (n < 1) return out;
  out.push_back(start(prompt));
  const auto& stops = lane_.o.stop_ids;
  auto is_stop = [&](int32_t id) { return std::find(stops.begin(), stops.end(), id) != stops.end(); };
  while (int64_t(out.size()) < n && !is_stop(out.back()) && lane_.pos < m_.backend().capacity().max_ctx) {
    const std::vector<int32_t> r = round(n - int64_t(out.size()));
    out.insert(out.end(), r.begin(), r.end());
  }
  return out;
}

SpeculativeState SpeculativeDecoder::save() {
  const SpeculativeLane& l = lane_;
  return {.slot = m_.backend().snapshot(l.slot, l.pos, l.mtp_pos), .pos = l.pos, .mtp_pos = l.mtp_pos,
          .current = l.current, .generated = l.generated, .pending = l.pending, .fed_tail = l.fed_tail};
}

void SpeculativeDecoder::resume(const SpeculativeState& s) {
  if (!s.slot) fail("speculative: resume from an empty state");
  m_.backend().restore(lane_.slot, *s.slot);
  lane_.pos = s.pos;
  lane_.mtp_pos = s.mtp_pos;
  lane_.current = s.current;
  lane_.generated = s.generated;
  lane_.pending = s.pending;
  lane_.fed_tail = s.fed_tail;
}

}  // namespace dsv4
