#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"

namespace dsv4 {

std::string StreamDecoder::push(int32_t id) {
  int32_t one[1] = {id};
  pending_ += tok_->decode(one, skip_special_);
  return take_complete();
}

std::string StreamDecoder::flush() {
  std::string out = utf8::lossy(pending_);
  pending_.clear();
  return out;
}

// Emits everything except a trailing partial character that later bytes could still complete.
std::string StreamDecoder::take_complete() {
  size_t keep = utf8::incomplete_tail_len(pending_);
  std::string out = utf8::lossy(std::string_view(pending_).substr(0, pending_.size() - keep));
  pending_.erase(0, pending_.size() - keep);
  return out;
}

}  // namespace dsv4
