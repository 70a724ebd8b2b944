#include "runtime/generate.h"

#include <algorithm>
#include <chrono>

#include "core/error.h"

namespace dsv4 {

const char* finish_reason_name(FinishReason f) { return f == FinishReason::Stop ? "stop" : "length"; }

std::string StopStringFilter::push(const std::string& text) {
  if (stopped_) return "";
  pending_ += text;
  size_t cut = std::string::npos;
  for (const auto& s : stops_)
    if (!s.empty()) cut = std::min(cut, pending_.find(s));
  if (cut != std::string::npos) {
    stopped_ = true;
    std::string out = pending_.substr(0, cut);
    pending_.clear();
    return out;
  }
  // Keep the longest suffix that is a proper prefix of some stop string.
  size_t hold = 0;
  for (const auto& s : stops_)
    for (size_t k = std::min(s.size() - (s.empty() ? 0 : 1), pending_.size()); k > hold; --k)
      if (pending_.compare(pending_.size() - k, k, s, 0, k) == 0) {
        hold = k;
        break;
      }
  std::string out = pending_.substr(0, pending_.size() - hold);
  pending_.erase(0, pending_.size() - hold);
  return out;
}

std::string StopStringFilter::flush() {
  std::string out;
  out.swap(pending_);
  return stopped_ ? "" : out;
}

GenerationResult generate_steps(const ModelConfig& cfg, const NextFn& next, const Tokenizer& tok,
                                const std::vector<int32_t>& prompt, const StopConditions& stop, int top_logprobs,
                                const std::function<void(const std::string&)>& on_text) {
  using clock = std::chrono::steady_clock;
  if (prompt.empty()) fail("the prompt is empty (it encodes to no tokens)");
  if (int64_t(prompt.size()) >= cfg.max_position_embeddings)
    fail("the prompt has ", prompt.size(), " tokens; the model's context is ", cfg.max_position_embeddings,
         " (max_position_embeddings)");
  const int64_t budget = std::min<int64_t>(stop.max_tokens, cfg.max_position_embeddings - int64_t(prompt.size()));

  GenerationResult r;
  r.stats.prompt_tokens = int64_t(prompt.size());
  StreamDecoder dec(tok);
  StopStringFilter filter(stop.stop_strings);
  std::vector<int32_t> history = prompt;
  auto emit = [&](const std::string& piece) {
    if (piece.empty()) return;
    r.text += piece;
    if (on_text) on_text(piece);
  };

  // The prompt's step: prefill_s covers its forward (and, with sampling in the step, the first draw).
  const bool want_lp = top_logprobs >= 0;
  const auto t0 = clock::now();
  std::vector<int32_t> feed_ids = prompt;
  clock::time_point t_first;
  bool first = true;
  while (int64_t(r.ids.size()) < budget) {
    Logprobs lp;
    const int32_t id = next(feed_ids, history, want_lp ? &lp : nullptr);
    if (first) {
      t_first = clock::now();
      r.stats.prefill_s = r.stats.ttft_s = std::chrono::duration<double>(t_first - t0).count();
      first = false;
    }
    if (std::find(stop.stop_ids.begin(), stop.stop_ids.end(), id) != stop.stop_ids.end()) {
      r.finish = FinishReason::Stop;
      r.stop_id = id;
      break;
    }
    r.ids.push_back(id);
    if (want_lp) r.logprobs.push_back(std::move(lp));
    history.push_back(id);
    emit(filter.push(dec.push(id)));
    if (filter.stopped()) {
      r.finish = FinishReason::Stop;
      break;
    }
    if (int64_t(r.ids.size()) == budget) break;
    feed_ids = {id};
  }
  if (!filter.stopped()) {
    emit(filter.push(dec.flush()));
    emit(filter.flush());
    if (filter.stopped()) r.finish = FinishReason::Stop;
  }
  r.stats.generated_tokens = int64_t(r.ids.size());
  if (r.ids.size() > 1) r.stats.decode_s = std::chrono::duration<double>(clock::now() - t_first).count();
  return r;
}

}  // namespace dsv4
