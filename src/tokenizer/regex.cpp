#define PCRE2_CODE_UNIT_WIDTH 8
#include "tokenizer/regex.h"

#include <pcre2.h>

#include "core/error.h"

namespace dsv4::tok {
namespace {

// Unicode White_Space, which is what Oniguruma's \s matches (PCRE2's UCP \s also takes U+180E).
constexpr std::string_view kWhiteSpace =
    "\\t-\\r\\x{20}\\x{85}\\x{a0}\\x{1680}\\x{2000}-\\x{200a}\\x{2028}\\x{2029}\\x{202f}\\x{205f}\\x{3000}";

std::string pcre2_message(int code) {
  PCRE2_UCHAR buf[256];
  int n = pcre2_get_error_message(code, buf, sizeof buf);
  return n < 0 ? "error " + std::to_string(code) : std::string(reinterpret_cast<char*>(buf), size_t(n));
}

// Per-thread match scratch: one ovector (only the whole match is read) and a JIT stack large enough
// for long runs of one character.
struct Scratch {
  pcre2_match_data* md = pcre2_match_data_create(1, nullptr);
  pcre2_jit_stack* stack = pcre2_jit_stack_create(32 * 1024, 4 * 1024 * 1024, nullptr);
  pcre2_match_context* ctx = pcre2_match_context_create(nullptr);
  Scratch() {
    if (ctx && stack) pcre2_jit_stack_assign(ctx, nullptr, stack);
  }
  ~Scratch() {
    pcre2_match_context_free(ctx);
    pcre2_jit_stack_free(stack);
    pcre2_match_data_free(md);
  }
};

Scratch& scratch() {
  thread_local Scratch s;
  return s;
}

}  // namespace

std::string translate_oniguruma(std::string_view p) {
  std::string out;
  out.reserve(p.size() + 16);
  bool in_class = false;
  for (size_t i = 0; i < p.size(); ++i) {
    char c = p[i];
    if (c == '\\' && i + 1 < p.size()) {
      char n = p[i + 1];
      ++i;
      if (n == 's') {
        if (in_class) {
          out += kWhiteSpace;
        } else {
          out += '[';
          out += kWhiteSpace;
          out += ']';
        }
      } else if (n == 'S' && !in_class) {
        out += "[^";
        out += kWhiteSpace;
        out += ']';
      } else {
        out += c;
        out += n;
      }
      continue;
    }
    if (!in_class && c == '[') {
      in_class = true;
      out += c;
      // A ']' right after '[' or '[^' is a literal member, not the end of the class.
      if (i + 1 < p.size() && p[i + 1] == '^') out += p[++i];
      if (i + 1 < p.size() && p[i + 1] == ']') out += p[++i];
      continue;
    }
    if (in_class && c == ']') in_class = false;
    out += c;
  }
  return out;
}

struct Regex::Impl {
  pcre2_code* code = nullptr;
  bool jit = false;
  ~Impl() { pcre2_code_free(code); }
};

Regex::Regex(std::string_view pattern, bool literal, const std::string& what) : impl_(std::make_unique<Impl>()) {
  std::string src = literal ? std::string(pattern) : translate_oniguruma(pattern);
  int err = 0;
  PCRE2_SIZE off = 0;
  uint32_t opts = PCRE2_UTF | PCRE2_UCP | (literal ? PCRE2_LITERAL : 0);
  impl_->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(src.data()), src.size(), opts, &err, &off, nullptr);
  if (!impl_->code)
    fail(what, ": invalid regex /", pattern, "/: ", pcre2_message(err), " at offset ", off);
  impl_->jit = pcre2_jit_compile(impl_->code, PCRE2_JIT_COMPLETE) == 0;
}

Regex::~Regex() = default;
Regex::Regex(Regex&&) noexcept = default;
Regex& Regex::operator=(Regex&&) noexcept = default;

bool Regex::next_match(std::string_view subject, size_t from, size_t* begin, size_t* end) const {
  Scratch& s = scratch();
  auto* subj = reinterpret_cast<PCRE2_SPTR>(subject.data());
  while (from <= subject.size()) {
    int rc = impl_->jit ? pcre2_jit_match(impl_->code, subj, subject.size(), from, PCRE2_NO_UTF_CHECK, s.md, s.ctx)
                        : pcre2_match(impl_->code, subj, subject.size(), from, PCRE2_NO_UTF_CHECK, s.md, s.ctx);
    if (rc == PCRE2_ERROR_NOMATCH) return false;
    if (rc < 0) fail("tokenizer regex match failed: ", pcre2_message(rc));
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(s.md);
    if (ov[1] > ov[0]) {
      *begin = ov[0];
      *end = ov[1];
      return true;
    }
    // Empty match: skip one character and search again (empty pieces carry no text).
    from = ov[0] + 1;
    while (from < subject.size() && (uint8_t(subject[from]) & 0xC0) == 0x80) ++from;
  }
  return false;
}

}  // namespace dsv4::tok
