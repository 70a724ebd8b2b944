#include "grammar/regex_grammar.h"

#include <cctype>
#include <cstdio>

#include "grammar/json_schema.h"

namespace dsv4::grammar {

namespace {

ByteSet range(uint8_t lo, uint8_t hi) {
  ByteSet s;
  for (int c = lo; c <= hi; ++c) s.set(size_t(c));
  return s;
}

ByteSet ascii_all() { return range(0, 0x7F); }

// Recursive descent over the pattern; each construct becomes a Seq.
class RegexParser {
 public:
  RegexParser(const CharContext& cx, std::string_view p, const std::string& where) : cx_(cx), p_(p), where_(where) {}

  Seq parse() {
    bool anchored_start = false, anchored_end = false;
    if (!p_.empty() && p_[0] == '^') {
      anchored_start = true;
      p_.remove_prefix(1);
    }
    if (!p_.empty() && p_.back() == '$' && !escaped_at(p_.size() - 1)) {
      anchored_end = true;
      p_.remove_suffix(1);
    }
    Seq body = alternation();
    if (i_ < p_.size()) unsupported("unbalanced ')'");
    const Seq any = cx_.g.star(ascii_class(cx_, ascii_all(), true));
    return (anchored_start ? Seq{} : any) + body + (anchored_end ? Seq{} : any);
  }

 private:
  [[noreturn]] void unsupported(const std::string& what) {
    throw UnsupportedSchema(cat("unsupported JSON Schema feature at ", where_, ": pattern ", what));
  }
  bool escaped_at(size_t k) const {
    size_t n = 0;
    while (k > n && p_[k - 1 - n] == '\\') ++n;
    return n % 2 == 1;
  }
  bool more() const { return i_ < p_.size(); }
  char peek() const { return p_[i_]; }

  Seq alternation() {
    if (++depth_ > 64) unsupported("groups nested deeper than 64");
    std::vector<Seq> alts{sequence()};
    while (more() && peek() == '|') {
      ++i_;
      alts.push_back(sequence());
    }
    --depth_;
    return cx_.g.alt(alts, "regex_alt");
  }

  Seq sequence() {
    Seq out;
    while (more() && peek() != '|' && peek() != ')') {
      Seq a = atom();
      out += quantified(a);
    }
    return out;
  }

  Seq quantified(const Seq& a) {
    const std::optional<Quantifier> q = parse_quantifier(p_, i_);
    if (!q) return a;
    if (!q->error.empty()) unsupported(q->error);
    i_ = q->end;
    if (more() && peek() == '?') ++i_;  // lazy: same language
    if (more() && (peek() == '*' || peek() == '+' || peek() == '?' || peek() == '{')) unsupported("stacked quantifiers");
    return cx_.g.repeat(a, q->min, q->max);
  }

  Seq atom() {
    const char c = p_[i_++];
    switch (c) {
      case '(': {
        if (more() && peek() == '?') {
          if (i_ + 1 < p_.size() && p_[i_ + 1] == ':') i_ += 2;
          else unsupported("group (?...) other than (?:...)");
        }
        Seq inner = alternation();
        if (!more() || peek() != ')') unsupported("unclosed '('");
        ++i_;
        return cx_.g.alt({inner}, "group");
      }
      case '[': return klass();
      case '.': {
        ByteSet s = ascii_all();
        s.reset('\n');
        s.reset('\r');
        return ascii_class(cx_, s, true);
      }
      case '\\': return escape(false, nullptr);
      case '^':
      case '$': unsupported(std::string("anchor '") + c + "' inside the pattern");
      case '*':
      case '+':
      case '?':
      case '{': unsupported(std::string("quantifier '") + c + "' with nothing before it");
      default: {
        if (uint8_t(c) < 0x80) return ascii_char(uint8_t(c), cx_.raw);
        // A literal non-ASCII character: its UTF-8 bytes as they are.
        size_t j = i_;
        while (j < p_.size() && (uint8_t(p_[j]) & 0xC0) == 0x80) ++j;
        Seq s = Grammar::lit(p_.substr(i_ - 1, j - i_ + 1));
        i_ = j;
        return s;
      }
    }
  }

  // An escape after '\'. In a class (`into` set), adds to it and returns an empty Seq.
  Seq escape(bool in_class, ByteSet* into) {
    if (!more()) unsupported("trailing '\\'");
    const char c = p_[i_++];
    ByteSet s;
    bool negate = false;
    switch (c) {
      case 'd': s = range('0', '9'); break;
      case 'D': s = range('0', '9'), negate = true; break;
      case 'w': s = range('0', '9') | range('a', 'z') | range('A', 'Z'), s.set('_'); break;
      case 'W': s = range('0', '9') | range('a', 'z') | range('A', 'Z'), s.set('_'), negate = true; break;
      case 's': for (char w : {' ', '\t', '\n', '\r', '\f', '\v'}) s.set(uint8_t(w)); break;
      case 'S': for (char w : {' ', '\t', '\n', '\r', '\f', '\v'}) s.set(uint8_t(w)); negate = true; break;
      case 'n': s.set('\n'); break;
      case 't': s.set('\t'); break;
      case 'r': s.set('\r'); break;
      case 'f': s.set('\f'); break;
      case 'v': s.set('\v'); break;
      default:
        if (std::isalnum(uint8_t(c))) unsupported(std::string("escape '\\") + c + "'");
        s.set(uint8_t(c));  // escaped punctuation: itself
    }
    if (negate) {
      if (in_class) unsupported(std::string("'\\") + c + "' inside a class");
      return ascii_class(cx_, ascii_all() & ~s, true);
    }
    if (in_class) {
      *into |= s;
      return {};
    }
    return ascii_class(cx_, s, false);
  }

  Seq klass() {
    bool negate = false;
    if (more() && peek() == '^') {
      negate = true;
      ++i_;
    }
    ByteSet s;
    std::vector<Seq> non_ascii;
    bool first = true;
    while (true) {
      if (!more()) unsupported("unclosed '['");
      char c = p_[i_];
      if (c == ']' && !first) {
        ++i_;
        break;
      }
      first = false;
      ++i_;
      if (c == '\\') {
        escape(true, &s);
        continue;
      }
      if (uint8_t(c) >= 0x80) {
        if (negate) unsupported("non-ASCII characters in a negated class");
        size_t j = i_;
        while (j < p_.size() && (uint8_t(p_[j]) & 0xC0) == 0x80) ++j;
        non_ascii.push_back(Grammar::lit(p_.substr(i_ - 1, j - i_ + 1)));
        i_ = j;
        if (more() && peek() == '-' && i_ + 1 < p_.size() && p_[i_ + 1] != ']') unsupported("a non-ASCII range");
        continue;
      }
      if (more() && peek() == '-' && i_ + 1 < p_.size() && p_[i_ + 1] != ']') {
        const char hi = p_[i_ + 1];
        if (hi == '\\' || uint8_t(hi) >= 0x80 || uint8_t(hi) < uint8_t(c)) unsupported("class range");
        s |= range(uint8_t(c), uint8_t(hi));
        i_ += 2;
        continue;
      }
      s.set(uint8_t(c));
    }
    if (negate) return ascii_class(cx_, ascii_all() & ~s, true);
    if (non_ascii.empty()) return ascii_class(cx_, s, false);
    if (s.any()) non_ascii.push_back(ascii_class(cx_, s, false));
    return cx_.g.alt(non_ascii, "class");
  }

  const CharContext& cx_;
  std::string_view p_;
  std::string where_;
  size_t i_ = 0;
  int depth_ = 0;  // nested alternations (groups)
};

}  // namespace

std::optional<Quantifier> parse_quantifier(std::string_view t, size_t i) {
  if (i >= t.size()) return std::nullopt;
  Quantifier q;
  q.end = i + 1;
  switch (t[i]) {
    case '*': q.min = 0, q.max = -1; return q;
    case '+': q.min = 1, q.max = -1; return q;
    case '?': q.min = 0, q.max = 1; return q;
    case '{': break;
    default: return std::nullopt;
  }
  const size_t close = t.find('}', i);
  if (close == std::string_view::npos) {
    q.error = "'{' without '}'";
    return q;
  }
  const std::string body(t.substr(i + 1, close - i - 1));
  long long a = 0, b = 0;
  char comma = 0;
  const int n = std::sscanf(body.c_str(), "%lld%c%lld", &a, &comma, &b);
  if (n == 1) q.min = q.max = a;
  else if (n == 2 && comma == ',') q.min = a, q.max = -1;
  else if (n == 3 && comma == ',') q.min = a, q.max = b;
  else q.error = "repetition {" + body + "}";
  if (q.min < 0 || (q.max >= 0 && q.max < q.min) || q.min > 10000 || q.max > 10000) q.error = "repetition {" + body + "}";
  q.end = close + 1;
  return q;
}

Seq ascii_char(uint8_t c, bool raw) {
  if (raw) return Grammar::lit(std::string(1, char(c)));
  switch (c) {
    case '"': return Grammar::lit("\\\"");
    case '\\': return Grammar::lit("\\\\");
    case '\n': return Grammar::lit("\\n");
    case '\t': return Grammar::lit("\\t");
    case '\r': return Grammar::lit("\\r");
    case '\b': return Grammar::lit("\\b");
    case '\f': return Grammar::lit("\\f");
    default: break;
  }
  if (c < 0x20 || c == 0x7F) {
    char buf[8];
    std::snprintf(buf, sizeof buf, "\\u%04x", c);
    return Grammar::lit(buf);
  }
  return Grammar::lit(std::string(1, char(c)));
}

Seq ascii_class(const CharContext& cx, const ByteSet& set, bool any_non_ascii) {
  ByteSet plain;
  std::vector<Seq> alts;
  for (int c = 0; c < 0x80; ++c) {
    if (!set.test(size_t(c))) continue;
    if (cx.raw) {
      if (c != '<' || cx.allow_lt) plain.set(size_t(c));
    } else if (c >= 0x20 && c != 0x7F && c != '"' && c != '\\') {
      plain.set(size_t(c));
    } else {
      alts.push_back(ascii_char(uint8_t(c), false));
    }
  }
  if (plain.any()) alts.insert(alts.begin(), Grammar::set(plain));
  if (any_non_ascii) alts.push_back(cx.utf8_any);
  if (alts.empty()) throw UnsupportedSchema("unsupported JSON Schema feature: a pattern class that matches nothing");
  return cx.g.alt(alts, "char");
}

Seq utf8_any_rule(Grammar& g) {
  const Seq cont = Grammar::set(range(0x80, 0xBF));
  return Seq(g.alt(
      {
          Grammar::set(range(0xC2, 0xDF)) + cont,
          Grammar::lit("\xE0") + Grammar::set(range(0xA0, 0xBF)) + cont,
          Grammar::set(range(0xE1, 0xEC) | range(0xEE, 0xEF)) + cont + cont,
          Grammar::lit("\xED") + Grammar::set(range(0x80, 0x9F)) + cont,
          Grammar::lit("\xF0") + Grammar::set(range(0x90, 0xBF)) + cont + cont,
          Grammar::set(range(0xF1, 0xF3)) + cont + cont + cont,
          Grammar::lit("\xF4") + Grammar::set(range(0x80, 0x8F)) + cont + cont,
      },
      "utf8"));
}

Seq regex_grammar(const CharContext& cx, std::string_view pattern, const std::string& where) {
  return RegexParser(cx, pattern, where).parse();
}

}  // namespace dsv4::grammar
