// A grammar written by hand, in a GBNF-like text (llama.cpp's notation, a subset): `dsv4 run
// --grammar FILE`.
//
//   root  ::= "{" ws pair ("," ws pair)* "}"     # `root` is the start rule; '#' starts a comment
//   pair  ::= [a-z]+ ":" ws ("yes" | "no")
//   ws    ::= [ \t\n]{0,4}
//
// Terms: "literal" (escapes \n \t \r \\ \" \xHH), [class] (ranges, ^ negation, the same escapes;
// non-ASCII characters listed one by one, a negated class matches every non-ASCII character), '.'
// (any UTF-8 character), a rule name, ( group ); postfix * + ? {n} {n,} {n,m}; alternatives with '|'.
// A rule continues over lines until the next `name ::=`. Errors name the source and line.
#pragma once
#include <string>
#include <string_view>

#include "grammar/grammar.h"

namespace dsv4::grammar {

Grammar parse_gbnf(std::string_view text, const std::string& source);

}  // namespace dsv4::grammar
