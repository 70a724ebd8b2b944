// A compiled PCRE2 pattern (UTF + Unicode properties, JIT when available) for the pre-tokenizer.
// Hugging Face compiles tokenizer.json patterns with Oniguruma; the one difference that matters for
// these patterns is `\s`, which in Oniguruma is exactly the Unicode White_Space set, so
// `translate_oniguruma` rewrites it into that explicit set before compiling.
#pragma once
#include <cstddef>
#include <memory>
#include <string>
#include <string_view>

namespace dsv4::tok {

// `\s` / `\S` outside a character class and `\s` inside one become the explicit White_Space set;
// everything else is passed through unchanged.
std::string translate_oniguruma(std::string_view pattern);

class Regex {
 public:
  // Throws dsv4::Error naming `what` (e.g. "tokenizer.json: pre_tokenizer[2]") on an invalid pattern.
  Regex(std::string_view pattern, bool literal, const std::string& what);
  ~Regex();
  Regex(Regex&&) noexcept;
  Regex& operator=(Regex&&) noexcept;

  // Calls fn(begin, end) for every successive non-empty, non-overlapping match in `subject`, which
  // must be valid UTF-8 (not re-checked). The subject is matched on its own: anchors and lookarounds
  // see its ends as the ends of the text.
  template <typename Fn>
  void for_each_match(std::string_view subject, Fn&& fn) const {
    size_t pos = 0;
    size_t b = 0, e = 0;
    while (next_match(subject, pos, &b, &e)) {
      fn(b, e);
      pos = e;
    }
  }

 private:
  bool next_match(std::string_view subject, size_t from, size_t* begin, size_t* end) const;
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace dsv4::tok
