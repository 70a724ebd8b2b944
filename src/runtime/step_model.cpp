#include "runtime/step_model.h"

#include <algorithm>

#include "core/error.h"

namespace dsv4 {

CpuStepModel::CpuStepModel(const Model& model, int max_seqs) : model_(model), max_seqs_(max_seqs) {
  if (max_seqs_ < 1) fail("CpuStepModel: max_seqs must be at least 1 (got ", max_seqs_, ")");
}

CpuStepModel::CpuStepModel(std::unique_ptr<Model> model, int max_seqs)
    : owned_(std::move(model)), model_(*owned_), max_seqs_(max_seqs) {
  if (max_seqs_ < 1) fail("CpuStepModel: max_seqs must be at least 1 (got ", max_seqs_, ")");
}

int CpuStepModel::new_sequence() {
  for (size_t i = 0; i < slots_.size(); ++i)
    if (!slots_[i]) {
      slots_[i] = std::make_unique<SequenceState>(model_.new_state());
      return int(i);
    }
  if (int64_t(slots_.size()) >= max_seqs_) fail("all ", max_seqs_, " sequence slots are taken");
  slots_.push_back(std::make_unique<SequenceState>(model_.new_state()));
  return int(slots_.size() - 1);
}

void CpuStepModel::release(int slot) {
  if (slot >= 0 && size_t(slot) < slots_.size()) slots_[size_t(slot)].reset();
}

SequenceState& CpuStepModel::state(int slot, int64_t pos) {
  if (slot < 0 || size_t(slot) >= slots_.size() || !slots_[size_t(slot)]) fail("sequence slot ", slot, " is not taken");
  SequenceState& st = *slots_[size_t(slot)];
  if (st.pos != pos) fail("sequence slot ", slot, " is at position ", st.pos, ", not ", pos);
  return st;
}

Tensor CpuStepModel::prefill(int slot, int64_t pos, const std::vector<int32_t>& tokens, bool all_logits) {
  ForwardOptions o;
  o.all_logits = all_logits;
  return model_.forward(state(slot, pos), tokens, o);
}

Tensor CpuStepModel::decode(const std::vector<DecodeItem>& items) {
  const int64_t V = model_.config().vocab_size;
  Tensor out({int64_t(items.size()), V});
  ForwardOptions last;
  last.all_logits = false;
  for (size_t b = 0; b < items.size(); ++b) {
    const DecodeItem& it = items[b];
    Tensor l = model_.forward(state(it.slot, it.pos), {it.token}, last);
    std::copy(l.data.begin(), l.data.end(), out.row(int64_t(b)));
  }
  return out;
}

SampledStep StepModel::decode_sampled(const std::vector<DecodeItem>& items, const std::vector<RowSampling>& rows) {
  if (rows.size() != items.size()) fail("decode_sampled: ", items.size(), " items but ", rows.size(), " rows");
  SampledStep r;
  r.logits = decode(items);
  const int64_t V = config().vocab_size;
  for (size_t b = 0; b < rows.size(); ++b)
    r.ids.push_back(rows[b].host ? -1 : sample_philox(r.logits.row(int64_t(b)), V, rows[b].params, rows[b].step));
  return r;
}

SampledStep StepModel::prefill_sampled(int slot, int64_t pos, const std::vector<int32_t>& tokens, const RowSampling& row) {
  SampledStep r;
  r.logits = prefill(slot, pos, tokens, false);
  r.ids.push_back(row.host ? -1 : sample_philox(r.logits.ptr(), config().vocab_size, row.params, row.step));
  return r;
}

StepSequence::StepSequence(StepModel& m, int64_t chunk) : m_(m), slot_(m.new_sequence()), chunk_(std::max<int64_t>(chunk, 1)) {}

StepSequence::~StepSequence() { m_.release(slot_); }

Tensor StepSequence::feed(const std::vector<int32_t>& tokens, bool all) {
  const int64_t T = int64_t(tokens.size()), V = m_.config().vocab_size;
  if (T == 0) fail("forward: empty chunk");
  if (pos_ + T > m_.max_context())
    fail("the sequence would reach ", pos_ + T, " positions; the context holds ", m_.max_context());
  if (T == 1) {
    Tensor l = m_.decode({{slot_, tokens[0], pos_}});
    ++pos_;
    return l;
  }
  if (T <= chunk_) {
    Tensor l = m_.prefill(slot_, pos_, tokens, all);
    pos_ += T;
    return l;
  }
  Tensor out({all ? T : 1, V});
  for (int64_t t0 = 0; t0 < T; t0 += chunk_) {
    const std::vector<int32_t> part(tokens.begin() + t0, tokens.begin() + std::min(T, t0 + chunk_));
    const int64_t n = int64_t(part.size());
    Tensor l = m_.prefill(slot_, pos_, part, all);
    if (all)
      std::copy(l.data.begin(), l.data.end(), out.row(t0));
    else if (t0 + n == T)
      std::copy(l.data.end() - V, l.data.end(), out.row(0));
    pos_ += n;
  }
  return out;
}

int32_t StepSequence::feed_sampled(const std::vector<int32_t>& tokens, const RowSampling& row) {
  const int64_t T = int64_t(tokens.size());
  if (T == 0) fail("forward: empty chunk");
  if (pos_ + T > m_.max_context())
    fail("the sequence would reach ", pos_ + T, " positions; the context holds ", m_.max_context());
  RowSampling r = row;
  r.host = false;
  int32_t id;
  if (T == 1) {
    id = m_.decode_sampled({{slot_, tokens[0], pos_}}, {r}).ids.at(0);
  } else {
    int64_t t0 = 0;
    for (; T - t0 > chunk_; t0 += chunk_)  // the leading chunks: their logits are not needed
      m_.prefill(slot_, pos_ + t0, std::vector<int32_t>(tokens.begin() + t0, tokens.begin() + t0 + chunk_), false);
    id = m_.prefill_sampled(slot_, pos_ + t0, std::vector<int32_t>(tokens.begin() + t0, tokens.end()), r).ids.at(0);
  }
  pos_ += T;
  return id;
}

GenerationResult generate(StepModel& model, const Tokenizer& tok, const std::vector<int32_t>& prompt,
                          Sampler& sampler, const StopConditions& stop, int top_logprobs,
                          const std::function<void(const std::string&)>& on_text) {
  StepSequence seq(model);
  ModelConfig cfg = model.config();  // generate() stops at the end of the backend's context
  cfg.max_position_embeddings = std::min(cfg.max_position_embeddings, model.max_context());
  if (model.samples_on_device() && device_samplable(sampler.params()) && top_logprobs < 0) {
    RowSampling row;
    row.params = sampler.params();
    return generate_steps(
        cfg,
        [&](const std::vector<int32_t>& tokens, const std::vector<int32_t>&, Logprobs*) {
          const int32_t id = seq.feed_sampled(tokens, row);
          ++row.step;
          return id;
        },
        tok, prompt, stop, top_logprobs, on_text);
  }
  return generate(
      cfg, [&](const std::vector<int32_t>& tokens) { return seq.feed(tokens, false); }, tok, prompt,
      sampler, stop, top_logprobs, on_text);
}

}  // namespace dsv4
