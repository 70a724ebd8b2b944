#include "tokenizer/tokenizer.h"

#include "core/error.h"
#include "tokenizer/tokenizer_impl.h"
#include "tokenizer/utf8.h"

namespace dsv4 {
namespace {

// Runs the pre-tokenizer and BPE over text that contains no added token. Valid UTF-8 runs go through
// the regexes; each maximal run of invalid bytes is one pre-token of its own.
void encode_ordinary(const Tokenizer::Impl& impl, std::string_view s, std::vector<int32_t>& out) {
  auto bpe = [&](std::string_view piece) { impl.bpe->encode(piece, out); };
  size_t run = 0, i = 0;
  while (i < s.size()) {
    if (uint8_t(s[i]) < 0x80) {
      ++i;
      continue;
    }
    if (size_t len = utf8::valid_seq_len(s, i)) {
      i += len;
      continue;
    }
    impl.pre.split(s.substr(run, i - run), bpe);
    size_t j = i + 1;
    while (j < s.size() && uint8_t(s[j]) >= 0x80 && utf8::valid_seq_len(s, j) == 0) ++j;
    bpe(s.substr(i, j - i));
    run = i = j;
  }
  impl.pre.split(s.substr(run), bpe);
}

}  // namespace

Tokenizer::Tokenizer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;
Tokenizer::~Tokenizer() = default;

std::vector<int32_t> Tokenizer::encode(std::string_view text) const {
  std::vector<int32_t> out;
  out.reserve(text.size() / 3 + 4);
  impl_->added.split(text, [&](std::string_view piece, int32_t id) {
    if (id >= 0)
      out.push_back(id);
    else
      encode_ordinary(*impl_, piece, out);
  });
  return out;
}

std::string Tokenizer::decode(std::span<const int32_t> ids, bool skip_special) const {
  std::string out;
  for (int32_t id : ids) {
    if (skip_special && is_special(id)) continue;
    if (id < 0 || size_t(id) >= impl_->kind.size() || impl_->kind[size_t(id)] == Impl::kNone)
      fail("token id ", id, " is not in the vocabulary (size ", vocab_size(), ")");
    out += impl_->text[size_t(id)];
  }
  return out;
}

std::string Tokenizer::token_bytes(int32_t id) const {
  int32_t one[1] = {id};
  return decode(one);
}

std::optional<int32_t> Tokenizer::token_id(std::string_view content) const {
  if (auto it = impl_->added_by_content.find(content); it != impl_->added_by_content.end()) return it->second;
  if (auto it = impl_->bpe->vocab().find(content); it != impl_->bpe->vocab().end()) return it->second;
  return std::nullopt;
}

bool Tokenizer::is_special(int32_t id) const {
  return id >= 0 && size_t(id) < impl_->kind.size() && impl_->kind[size_t(id)] == Impl::kSpecial;
}

int32_t Tokenizer::vocab_size() const { return int32_t(impl_->kind.size()); }
std::optional<int32_t> Tokenizer::bos_id() const { return impl_->bos; }
std::optional<int32_t> Tokenizer::eos_id() const { return impl_->eos; }
std::optional<int32_t> Tokenizer::pad_id() const { return impl_->pad; }

}  // namespace dsv4
