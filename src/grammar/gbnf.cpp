#include "grammar/gbnf.h"

#include <cctype>
#include <map>

#include "core/error.h"
#include "grammar/regex_grammar.h"

namespace dsv4::grammar {

namespace {

bool name_char(char c) { return std::isalnum(uint8_t(c)) || c == '_' || c == '-'; }

class GbnfParser {
 public:
  GbnfParser(std::string_view t, const std::string& source) : t_(t), source_(source), cx_{g_, utf8_any_rule(g_), true, true} {}

  Grammar parse() {
    skip_space(true);
    while (i_ < t_.size()) {
      const std::string name = identifier();
      if (name.empty()) error("expected a rule name");
      skip_space(false);
      if (t_.substr(i_, 3) != "::=") error("expected '::=' after '" + name + "'");
      i_ += 3;
      const uint32_t r = rule(name);
      if (defined_.count(name)) error("rule '" + name + "' is defined twice");
      defined_[name] = true;
      g_.define(r, alternatives());
      skip_space(true);
    }
    if (!rules_.count("root")) error("no 'root' rule");
    g_.set_root(rules_["root"]);
    try {
      g_.finish();
    } catch (const Error& e) {
      fail(source_, ": ", e.what());
    }
    return std::move(g_);
  }

 private:
  [[noreturn]] void error(const std::string& what) const {
    size_t line = 1;
    for (size_t k = 0; k < i_ && k < t_.size(); ++k) line += t_[k] == '\n';
    fail(source_, ":", line, ": ", what);
  }
  uint32_t rule(const std::string& name) {
    auto it = rules_.find(name);
    if (it != rules_.end()) return it->second;
    return rules_[name] = g_.new_rule(name);
  }
  // Skips spaces and comments; across newlines only when `newlines`. Inside a rule (newlines false)
  // a newline continues the rule unless a new `name ::=` follows.
  void skip_space(bool newlines) {
    while (i_ < t_.size()) {
      const char c = t_[i_];
      if (c == '#') {
        while (i_ < t_.size() && t_[i_] != '\n') ++i_;
      } else if (c == ' ' || c == '\t' || c == '\r') {
        ++i_;
      } else if (c == '\n') {
        if (!newlines && rule_starts(i_ + 1)) return;
        ++i_;
      } else {
        return;
      }
    }
  }
  bool rule_starts(size_t k) const {
    while (k < t_.size() && (t_[k] == ' ' || t_[k] == '\t' || t_[k] == '\r' || t_[k] == '\n')) ++k;
    size_t j = k;
    while (j < t_.size() && name_char(t_[j])) ++j;
    if (j == k) return false;
    while (j < t_.size() && (t_[j] == ' ' || t_[j] == '\t')) ++j;
    return t_.substr(j, 3) == "::=";
  }
  bool at_rule_end() const { return i_ >= t_.size() || (t_[i_] == '\n' && rule_starts(i_ + 1)); }
  std::string identifier() {
    const size_t b = i_;
    while (i_ < t_.size() && name_char(t_[i_])) ++i_;
    return std::string(t_.substr(b, i_ - b));
  }

  std::vector<Seq> alternatives() {
    if (++depth_ > 64) error("groups nested deeper than 64");
    std::vector<Seq> alts{sequence()};
    while (i_ < t_.size() && t_[i_] == '|') {
      ++i_;
      alts.push_back(sequence());
    }
    --depth_;
    return alts;
  }
  Seq sequence() {
    Seq out;
    while (true) {
      skip_space(false);
      if (at_rule_end() || t_[i_] == '|' || t_[i_] == ')') return out;
      Seq term = primary();
      out += postfix(term);
    }
  }
  Seq postfix(const Seq& a) {
    const std::optional<Quantifier> q = parse_quantifier(t_, i_);
    if (!q) return a;
    if (!q->error.empty()) error("bad " + q->error);
    i_ = q->end;
    return g_.repeat(g_.alt({a}, "group"), q->min, q->max);
  }
  uint8_t escape() {
    if (i_ >= t_.size()) error("a '\\' at the end");
    const char c = t_[i_++];
    switch (c) {
      case 'n': return '\n';
      case 't': return '\t';
      case 'r': return '\r';
      case 'x': {
        if (i_ + 2 > t_.size() || !std::isxdigit(uint8_t(t_[i_])) || !std::isxdigit(uint8_t(t_[i_ + 1])))
          error("\\x needs two hex digits");
        const uint8_t v = uint8_t(std::stoi(std::string(t_.substr(i_, 2)), nullptr, 16));
        i_ += 2;
        return v;
      }
      default: return uint8_t(c);
    }
  }
  Seq primary() {
    const char c = t_[i_];
    if (c == '"') {
      ++i_;
      std::string bytes;
      while (true) {
        if (i_ >= t_.size() || t_[i_] == '\n') error("unterminated string");
        const char d = t_[i_++];
        if (d == '"') break;
        bytes += d == '\\' ? char(escape()) : d;
      }
      if (bytes.empty()) return Seq{};
      return Grammar::lit(bytes);
    }
    if (c == '[') return klass();
    if (c == '.') {
      ++i_;
      ByteSet all;
      for (int k = 0; k < 0x80; ++k) all.set(size_t(k));
      return ascii_class(cx_, all, true);
    }
    if (c == '(') {
      ++i_;
      std::vector<Seq> alts = alternatives();
      skip_space(false);
      if (i_ >= t_.size() || t_[i_] != ')') error("expected ')'");
      ++i_;
      return g_.alt(alts, "group");
    }
    const std::string name = identifier();
    if (name.empty()) error(std::string("unexpected '") + c + "'");
    return Grammar::ref(rule(name));
  }
  Seq klass() {
    ++i_;
    bool negate = false;
    if (i_ < t_.size() && t_[i_] == '^') negate = true, ++i_;
    ByteSet s;
    std::vector<Seq> wide;
    auto one = [&]() -> int {  // an ASCII byte, or -1 after taking a non-ASCII character into `wide`
      const char d = t_[i_++];
      if (d == '\\') return escape();
      if (uint8_t(d) < 0x80) return uint8_t(d);
      size_t j = i_;
      while (j < t_.size() && (uint8_t(t_[j]) & 0xC0) == 0x80) ++j;
      if (negate) error("non-ASCII characters in a negated class");
      wide.push_back(Grammar::lit(t_.substr(i_ - 1, j - i_ + 1)));
      i_ = j;
      return -1;
    };
    while (true) {
      if (i_ >= t_.size() || t_[i_] == '\n') error("unterminated '['");
      if (t_[i_] == ']') {
        ++i_;
        break;
      }
      const int lo = one();
      if (lo >= 0 && i_ + 1 < t_.size() && t_[i_] == '-' && t_[i_ + 1] != ']') {
        ++i_;
        const int hi = one();
        if (hi < lo) error("bad class range (ranges are ASCII)");
        for (int k = lo; k <= hi; ++k) s.set(size_t(k));
      } else if (lo >= 0) {
        s.set(size_t(lo));
      }
    }
    if (negate) {
      ByteSet all;
      for (int k = 0; k < 0x80; ++k) all.set(size_t(k));
      return ascii_class(cx_, all & ~s, true);
    }
    if (s.any()) wide.push_back(ascii_class(cx_, s, false));
    if (wide.empty()) error("an empty class");
    return g_.alt(wide, "class");
  }

  std::string_view t_;
  std::string source_;
  Grammar g_;
  CharContext cx_;
  size_t i_ = 0;
  int depth_ = 0;  // nested groups
  std::map<std::string, uint32_t> rules_;
  std::map<std::string, bool> defined_;
};

}  // namespace

Grammar parse_gbnf(std::string_view text, const std::string& source) { return GbnfParser(text, source).parse(); }

}  // namespace dsv4::grammar
