// The sampling side of speculative decoding (runtime/speculative.h): the distribution a token is drawn
// from, and the speculative rejection rule that turns draws from a draft distribution q into draws from
// the target distribution p exactly (Leviathan et al. 2023, Chen et al. 2023).
//
// The distribution. Both the target (the main model's logits row) and the draft (MTP block's logits
// row) go through the same processing, the backend sampler's (backend/cpu/sampling.h, the GPU kernel):
//   temperature <= 0 or top-k 1: all mass on the first maximum (greedy);
//   else the candidates sorted by logit (ties: lower id first), the first top-k kept (0: all), weights
//   w_i = exp((z_i - z_max) / T); top-p keeps the shortest prefix whose weight reaches top_p * sum(w)
//   plus the candidates tied with its last logit; min-p keeps the prefix with w_i >= min_p (w relative
//   to the most likely); p_i = w_i / sum of the kept weights, 0 for every other id.
// Penalties and grammars are not part of it (they depend on the drafted prefix; the decoder refuses them).
//
// The rule, for a draft d drawn from q: accept d with probability min(1, p(d) / q(d)); otherwise draw
// from the residual r = max(0, p - q) / sum(max(0, p - q)). The token that comes out is distributed as
// p: P(out = x) = q(x) min(1, p(x)/q(x)) + (1 - sum_y min(p(y), q(y))) r(x) = min(p, q)(x) + max(0, p - q)(x)
// = p(x). The acceptance probability over d ~ q is sum_x min(p(x), q(x)) = 1 - TV(p, q). Greedy (point
// masses) is the special case: accept iff d is the target's argmax, else the residual is the argmax.
#pragma once
#include <cstdint>
#include <vector>

#include "runtime/sampler.h"

namespace dsv4 {

// A probability for every id of the vocabulary (dense; zeros outside the kept set).
using TokenDistribution = std::vector<double>;

// The distribution the parameters' temperature / top-k / top-p / min-p make of a logits row (above).
// Penalties and the grammar of `p` are ignored here (the decoder refuses them).
TokenDistribution sampling_distribution(const float* logits, int64_t vocab, const SamplingParams& p);

// The id an inverse-CDF draw picks: the first id (increasing) whose cumulative mass exceeds u * total
// mass; u in [0, 1). Ids of zero mass are never picked.
int32_t draw_token(const TokenDistribution& d, double u);

// min(1, p(d) / q(d)); 1 when q(d) is 0 (a draft of no draft mass is impossible, accepted if p allows it,
// rejected otherwise: the ratio's limit).
double acceptance_probability(const TokenDistribution& p, const TokenDistribution& q, int32_t draft);

// max(0, p - q) normalized; p itself when that is all zero (p == q: no rejection can happen then).
TokenDistribution residual_distribution(const TokenDistribution& p, const TokenDistribution& q);

// The rule on one draft: accepted (token = draft) when u_accept < acceptance_probability, else
// token = draw_token(residual, u_residual). u_accept, u_residual in [0, 1), independent.
struct DraftVerdict {
  bool accepted = false;
  int32_t token = -1;
};
DraftVerdict judge_draft(const TokenDistribution& p, const TokenDistribution& q, int32_t draft, double u_accept,
                         double u_residual);

}  // namespace dsv4
