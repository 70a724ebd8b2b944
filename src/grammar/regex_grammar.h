// A regular-expression subset compiled into grammar rules over a JSON string's characters (JSON
// Schema "pattern", and the built-in "format"s). Supported: literals (any UTF-8), '.', classes
// [...] with ranges and negation, \d \w \s \D \W \S and escaped punctuation, \n \t \r, groups (...)
// and (?:...), alternation |, quantifiers * + ? {n} {n,} {n,m} (lazy forms accepted, same language),
// '^' at the start and '$' at the end. A pattern without '^' / '$' may have anything before / after
// it (JSON Schema patterns are searches). Negated classes and '.' match every non-ASCII character;
// class ranges are ASCII only. Backreferences, lookaround, \b and the like throw UnsupportedSchema.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "grammar/grammar.h"

namespace dsv4::grammar {

struct CharContext {
  Grammar& g;
  Seq utf8_any;      // one non-ASCII UTF-8 character
  bool raw = false;      // the text itself (DSML string values, GBNF) instead of JSON escapes
  bool allow_lt = false;  // raw: whether classes may match '<' (not in DSML values: it opens the end tag)
};

// The JSON-string encoding of one ASCII character (escaped when it must be), or the byte itself (raw).
Seq ascii_char(uint8_t c, bool raw);
// Any of the ASCII characters in `set` (encoded as above), or also any non-ASCII one.
Seq ascii_class(const CharContext& cx, const ByteSet& set, bool any_non_ascii);
// One non-ASCII UTF-8 character (well-formed: no overlongs, no surrogates).
Seq utf8_any_rule(Grammar& g);

// A postfix quantifier at t[i] (* + ? {n} {n,} {n,m}), shared by the regex and GBNF parsers: nullopt
// when there is none; `error` set when it is malformed or above 10000.
struct Quantifier {
  int64_t min = 1, max = 1;  // max -1: unbounded
  size_t end = 0;            // the index after it
  std::string error;
};
std::optional<Quantifier> parse_quantifier(std::string_view t, size_t i);

Seq regex_grammar(const CharContext& cx, std::string_view pattern, const std::string& where);

}  // namespace dsv4::grammar
