// Turns a logits row into the next token: penalties, temperature, top-k, top-p, min-p, then a draw
// from a seeded generator (reproducible). Temperature <= 0 (or top-k 1) is greedy.
//
// Two draws exist. Sampler (the rows the backends' sampler cannot do: penalties, logprobs) draws from
// mt19937_64 seeded once per request. The backends' sampler (Backend::sample: the GPU's
// backend/cuda/sampling.h, its CPU twin backend/cpu/sampling.h) draws u = Philox(seed, step) with
// step = tokens the sequence sampled before; Runner::on_backend (runtime/runner.h) picks per row.
// Same distribution, different streams: at temperature > 0 one seed gives another (equally
// distributed) text with a penalty than without; greedy gives the same ids. A grammar works with
// both: on the host the Sampler masks the logits itself; for a backend row the runner hands the
// backend this step's mask (step_mask()) and advances the grammar on the drawn id (accept()).
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <random>
#include <utility>
#include <vector>

#include "grammar/matcher.h"

namespace dsv4 {

// Constrained decoding (docs/structured-output.md): the output must match `grammar`. With
// start_after >= 0 (thinking mode: the </think> id) the tokens up to and including that id are free
// and the grammar constrains what follows it.
struct GrammarConstraint {
  std::shared_ptr<const grammar::CompiledGrammar> grammar;  // null: no constraint
  int32_t start_after = -1;
};

struct SamplingParams {
  float temperature = 1.0f;
  int top_k = 0;              // 0 = off
  float top_p = 1.0f;         // 1 = off
  float min_p = 0.0f;         // 0 = off: keep tokens with p >= min_p * p_max
  float repetition_penalty = 1.0f;  // HF style: positive logits / r, negative * r, for seen tokens
  float presence_penalty = 0.0f;    // OpenAI style: - presence for every seen token
  float frequency_penalty = 0.0f;   // - frequency * count
  uint64_t seed = 0;
  GrammarConstraint grammar;
};

struct Logprobs {
  float chosen = 0;                             // log p(chosen) under the model's distribution
  std::vector<std::pair<int32_t, float>> top;   // the top-N tokens and their log p, best first
};

// Whether the backends' sampler (Backend::sample, SampleRow) does these parameters: everything but the
// penalties (repetition, presence, frequency); a grammar's mask goes with the row (SampleRow::mask).
// Logprobs are not computed there (Runner::on_backend checks top_logprobs).
bool backend_samplable(const SamplingParams& p);

class Sampler {
 public:
  // `end_ids` (EOS, the stop ids): with a grammar, allowed exactly where the grammar may end.
  explicit Sampler(SamplingParams p, std::vector<int32_t> end_ids = {});
  const SamplingParams& params() const { return p_; }

  // Picks the next token from logits [vocab]. `history` = the ids seen so far (prompt + generated),
  // for the penalties. When `lp` is given it receives log-probabilities of the unmodified logits
  // (the model's distribution) for the chosen token and the `top_n` best. With a grammar, only the
  // tokens it allows are candidates and the chosen one advances it; throws dsv4::Error when it allows
  // none (it cannot happen with a grammar from grammar/json_schema.h and a byte-level vocabulary).
  int32_t sample(const float* logits, int64_t vocab, const std::vector<int32_t>& history, Logprobs* lp = nullptr,
                 int top_n = 0);

  // A draw made elsewhere (the backend's sampler). step_mask(vocab): the grammar's allowed ids < vocab
  // of this step (valid until the next call on this Sampler), or null when no grammar constrains it (none, or
  // still thinking); throws dsv4::Error when it allows none. accept(id): the drawn id advances the
  // grammar; throws dsv4::Error when the grammar does not allow it.
  const grammar::TokenMask* step_mask(int64_t vocab);  // (vocab + 31) / 32 words
  void accept(int32_t id) { advance(id); }

 private:
  // The candidates of this step: the grammar's allowed ids, or nullopt for all.
  std::optional<std::vector<int32_t>> allowed(int64_t vocab);
  void advance(int32_t chosen);

  SamplingParams p_;
  std::mt19937_64 rng_;
  std::optional<grammar::Matcher> matcher_;  // with a grammar
  bool armed_ = false;                       // the grammar constrains this step
  grammar::TokenMask mask_;                  // scratch
};

}  // namespace dsv4
