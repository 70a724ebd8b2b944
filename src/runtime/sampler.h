// Turns a logits row into the next token: penalties, temperature, top-k, top-p, min-p, then a draw
// from a seeded generator (reproducible). Temperature <= 0 (or top-k 1) is greedy.
#pragma once
#include <cstdint>
#include <random>
#include <utility>
#include <vector>

namespace dsv4 {

struct SamplingParams {
  float temperature = 1.0f;
  int top_k = 0;              // 0 = off
  float top_p = 1.0f;         // 1 = off
  float min_p = 0.0f;         // 0 = off: keep tokens with p >= min_p * p_max
  float repetition_penalty = 1.0f;  // HF style: positive logits / r, negative * r, for seen tokens
  float presence_penalty = 0.0f;    // OpenAI style: - presence for every seen token
  float frequency_penalty = 0.0f;   // - frequency * count
  uint64_t seed = 0;
};

struct Logprobs {
  float chosen = 0;                             // log p(chosen) under the model's distribution
  std::vector<std::pair<int32_t, float>> top;   // the top-N tokens and their log p, best first
};

class Sampler {
 public:
  explicit Sampler(SamplingParams p);
  const SamplingParams& params() const { return p_; }

  // Picks the next token from logits [vocab]. `history` = the ids seen so far (prompt + generated),
  // for the penalties. When `lp` is given it receives log-probabilities of the unmodified logits
  // (the model's distribution) for the chosen token and the `top_n` best.
  int32_t sample(const float* logits, int64_t vocab, const std::vector<int32_t>& history, Logprobs* lp = nullptr,
                 int top_n = 0);

 private:
  SamplingParams p_;
  std::mt19937_64 rng_;
};

}  // namespace dsv4
