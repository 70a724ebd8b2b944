#include "runtime/sampler.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>
#include <numeric>
#include <unordered_map>

#include "core/error.h"

namespace dsv4 {

Sampler::Sampler(SamplingParams p, std::vector<int32_t> end_ids) : p_(std::move(p)), rng_(p_.seed) {
  if (!(p_.temperature >= 0) || std::isinf(p_.temperature)) fail("temperature must be >= 0, got ", p_.temperature);
  if (p_.top_k < 0) fail("top-k must be >= 0, got ", p_.top_k);
  if (!(p_.top_p > 0 && p_.top_p <= 1)) fail("top-p must be in (0, 1], got ", p_.top_p);
  if (!(p_.min_p >= 0 && p_.min_p <= 1)) fail("min-p must be in [0, 1], got ", p_.min_p);
  if (!(p_.repetition_penalty > 0)) fail("repetition penalty must be > 0, got ", p_.repetition_penalty);
  if (p_.grammar.grammar) {
    if (end_ids.empty()) fail("a grammar needs an end token (EOS) to finish on");
    matcher_.emplace(p_.grammar.grammar, std::move(end_ids));
    armed_ = p_.grammar.start_after < 0;
  }
}

std::optional<std::vector<int32_t>> Sampler::allowed(int64_t vocab) {
  if (!matcher_ || !armed_) return std::nullopt;
  matcher_->fill_mask(mask_);
  std::vector<int32_t> ids;
  const int64_t n = std::min<int64_t>(vocab, int64_t(mask_.size()) * 32);
  for (int64_t w = 0; w * 32 < n; ++w)
    for (uint32_t bits = mask_[size_t(w)]; bits; bits &= bits - 1) {
      const int64_t id = w * 32 + std::countr_zero(bits);
      if (id < n) ids.push_back(int32_t(id));
    }
  if (ids.empty()) fail("grammar: no token can continue the output");
  return ids;
}

const grammar::TokenMask* Sampler::step_mask(int64_t vocab) {
  if (!matcher_ || !armed_) return nullptr;
  matcher_->fill_mask(mask_);
  mask_.resize(size_t((vocab + 31) / 32), 0u);  // the backend's row: ids past the grammar's vocabulary never
  if (vocab % 32) mask_.back() &= (1u << (vocab % 32)) - 1u;
  if (std::all_of(mask_.begin(), mask_.end(), [](uint32_t w) { return w == 0; }))
    fail("grammar: no token can continue the output");
  return &mask_;
}

void Sampler::advance(int32_t chosen) {
  if (!matcher_) return;
  if (!armed_) {
    armed_ = chosen == p_.grammar.start_after;
    return;
  }
  if (!matcher_->accept(chosen)) fail("grammar: token ", chosen, " was sampled but is not allowed");
}

namespace {

void log_softmax(const float* x, int64_t n, std::vector<float>& out) {
  out.resize(static_cast<size_t>(n));
  const float mx = *std::max_element(x, x + n);
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) sum += std::exp(double(x[i]) - mx);
  const float lse = mx + float(std::log(sum));
  for (int64_t i = 0; i < n; ++i) out[size_t(i)] = x[i] - lse;
}

}  // namespace

bool backend_samplable(const SamplingParams& p) {
  return p.repetition_penalty == 1 && p.presence_penalty == 0 && p.frequency_penalty == 0;
}

int32_t Sampler::sample(const float* logits, int64_t vocab, const std::vector<int32_t>& history, Logprobs* lp,
                        int top_n) {
  std::vector<float> z(logits, logits + vocab);
  if (p_.repetition_penalty != 1 || p_.presence_penalty != 0 || p_.frequency_penalty != 0) {
    std::unordered_map<int32_t, int> count;
    for (int32_t id : history)
      if (id >= 0 && id < vocab) ++count[id];
    for (const auto& [id, c] : count) {
      float& v = z[size_t(id)];
      if (p_.repetition_penalty != 1) v = v > 0 ? v / p_.repetition_penalty : v * p_.repetition_penalty;
      v -= p_.presence_penalty + p_.frequency_penalty * float(c);
    }
  }

  int32_t chosen;
  std::optional<std::vector<int32_t>> only = allowed(vocab);
  if (p_.temperature <= 0 || p_.top_k == 1) {
    if (only) {
      chosen = (*only)[0];  // the first maximum among the allowed ids
      for (int32_t id : *only)
        if (z[size_t(id)] > z[size_t(chosen)]) chosen = id;
    } else {
      chosen = int32_t(std::max_element(z.begin(), z.end()) - z.begin());  // first maximum on ties
    }
  } else {
    // Candidates (all ids, or the grammar's) sorted by logit (ties: lower id first), then cut by
    // top-k, top-p, min-p.
    std::vector<int32_t> ids;
    if (only) {
      ids = std::move(*only);
    } else {
      ids.resize(static_cast<size_t>(vocab));
      std::iota(ids.begin(), ids.end(), 0);
    }
    int64_t keep = p_.top_k > 0 ? std::min<int64_t>(p_.top_k, int64_t(ids.size())) : int64_t(ids.size());
    auto by_logit = [&](int32_t a, int32_t b) { return z[size_t(a)] != z[size_t(b)] ? z[size_t(a)] > z[size_t(b)] : a < b; };
    std::partial_sort(ids.begin(), ids.begin() + keep, ids.end(), by_logit);
    ids.resize(static_cast<size_t>(keep));
    std::vector<double> prob(ids.size());
    const double mx = z[size_t(ids[0])] / p_.temperature;
    double sum = 0;
    for (size_t i = 0; i < ids.size(); ++i) sum += prob[i] = std::exp(z[size_t(ids[i])] / p_.temperature - mx);
    for (double& q : prob) q /= sum;
    size_t n = ids.size();
    if (p_.top_p < 1) {
      double cum = 0;
      for (size_t i = 0; i < n; ++i) {
        cum += prob[i];
        if (cum >= p_.top_p) {
          n = i + 1;
          break;
        }
      }
    }
    if (p_.min_p > 0) {
      const double floor = p_.min_p * prob[0];
      size_t m = 1;
      while (m < n && prob[m] >= floor) ++m;
      n = m;
    }
    double total = 0;
    for (size_t i = 0; i < n; ++i) total += prob[i];
    const double u = std::uniform_real_distribution<double>(0.0, total)(rng_);
    double cum = 0;
    chosen = ids[n - 1];
    for (size_t i = 0; i < n; ++i) {
      cum += prob[i];
      if (u < cum) {
        chosen = ids[i];
        break;
      }
    }
  }

  if (lp) {
    std::vector<float> ls;
    log_softmax(logits, vocab, ls);
    lp->chosen = ls[size_t(chosen)];
    lp->top.clear();
    if (top_n > 0) {
      std::vector<int32_t> ids(static_cast<size_t>(vocab));
      std::iota(ids.begin(), ids.end(), 0);
      const int64_t k = std::min<int64_t>(top_n, vocab);
      std::partial_sort(ids.begin(), ids.begin() + k, ids.end(), [&](int32_t a, int32_t b) {
        return ls[size_t(a)] != ls[size_t(b)] ? ls[size_t(a)] > ls[size_t(b)] : a < b;
      });
      for (int64_t i = 0; i < k; ++i) lp->top.emplace_back(ids[size_t(i)], ls[size_t(ids[size_t(i)])]);
    }
  }
  advance(chosen);
  return chosen;
}

}  // namespace dsv4
