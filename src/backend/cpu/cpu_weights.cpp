#include "backend/cpu/cpu_weights.h"

namespace dsv4 {
namespace {

// The leaf conversions of map_model: checkpoint views decoded to float32, counting progress as they go.
class Decoder {
 public:
  Decoder(uint64_t total, LoadProgress progress, ExpertRange experts)
      : progress_(std::move(progress)), experts_(experts) {
    status_.bytes_total = total;
  }

  Tensor vec(const TensorView& v) {
    if (!v.data) return Tensor();
    Tensor t = to_tensor(v);
    advance(v.nbytes);
    return t;
  }
  Tensor embed(const TensorView& v) { return vec(v); }
  std::vector<int32_t> ids(const TensorView& v) {
    if (!v.data) return {};
    Tensor t = vec(v);
    return std::vector<int32_t>(t.data.begin(), t.data.end());
  }
  LinearF linear(const LinearWeight& w) {
    LinearF l;
    if (!w.present()) return l;
    static_cast<Tensor&>(l) = dequantize(w);
    l.quant_act = w.format != WeightFormat::Dense;
    advance(w.bytes());
    return l;
  }
  LinearF matrix(const LinearWeight& w) { return linear(w); }
  LinearF head(const LinearWeight& w) { return linear(w); }
  // Another rank's routed experts stay empty (their bytes still count as done).
  ExpertF expert(const ExpertWeights& x, int64_t e) {
    if (experts_.holds(e)) return map_expert<CpuLeaves>(x, *this);
    advance(x.w1.bytes() + x.w2.bytes() + x.w3.bytes());
    return {};
  }

 private:
  void advance(uint64_t bytes) {
    status_.bytes_done += bytes;
    ++status_.tensors_done;
    if (progress_) progress_(status_);
  }
  LoadProgress progress_;
  ExpertRange experts_;
  LoadStatus status_;
};

}  // namespace

CpuWeights to_cpu_weights(const Weights& w, uint64_t total_bytes, LoadProgress progress, ExpertRange experts) {
  Decoder d(total_bytes, std::move(progress), experts);
  return map_model<CpuLeaves>(w, d);
}

}  // namespace dsv4
