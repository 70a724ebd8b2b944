// JSON Schema (and plain JSON) compiled to a byte-level Grammar (docs/structured-output.md lists what
// is supported). The output is JSON text that parses and validates against the schema:
// - types (one or a list), properties / required / additionalProperties (absent = false, as in
//   OpenAI's strict mode), enum and const, arrays with items and minItems / maxItems, anyOf / oneOf
//   (oneOf as anyOf: exclusivity is the schema's business), allOf of one schema, $ref to "#", "#/$defs/..",
//   "#/definitions/.." or any JSON pointer into the document (recursion allowed), strings with
//   minLength / maxLength, pattern (a regex subset, regex_grammar.h) or format (date, time,
//   date-time, uuid, ipv4, email), numbers and integers (bounded digit counts), nested objects.
// - Properties come in the schema's order; optional ones may be left out. Between tokens: nothing, one space
//   or tab, or a newline and up to SchemaOptions::max_indent spaces / tabs.
// Anything else (minimum, multipleOf, patternProperties, not, if/then, uniqueItems, unknown
// keywords...) throws UnsupportedSchema naming the keyword and where it is (a JSON pointer).
#pragma once
#include <map>
#include <string>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "grammar/grammar.h"

namespace dsv4::grammar {

class UnsupportedSchema : public Error {
 public:
  using Error::Error;
};

struct SchemaOptions {
  int max_indent = 16;      // spaces / tabs after a newline between two JSON tokens
  int max_int_digits = 16;  // digits of an integer part
  int max_frac_digits = 16; // digits of a fraction
};

// Builds rules for JSON values into a Grammar; shared by the whole-document compilers below and by
// the DSML tool-call grammar (dsml_grammar.h).
class SchemaCompiler {
 public:
  SchemaCompiler(Grammar& g, const nlohmann::ordered_json& root, SchemaOptions opt = {});
  Seq value(const nlohmann::ordered_json& schema, const std::string& path);  // one JSON value
  Seq any_value();                                                   // any JSON value
  Seq any_object();                                                  // any JSON object
  Seq ws();
  // A string's characters (no quotes) under the schema's string keywords; `raw`: the decoded text
  // itself (DSML string parameters) instead of JSON escapes. Everything but '<' in raw mode.
  Seq string_body(const nlohmann::ordered_json& schema, const std::string& path, bool raw);

 private:
  Seq typed(const nlohmann::ordered_json& s, const std::string& type, const std::string& path);
  Seq object(const nlohmann::ordered_json& s, const std::string& path);
  Seq array(const nlohmann::ordered_json& s, const std::string& path);
  Seq number(bool integer);
  Seq json_char();
  Seq raw_char();
  Seq quoted(const Seq& body) { return Grammar::lit("\"") + body + Grammar::lit("\""); }
  const nlohmann::ordered_json& resolve(const std::string& ref, const std::string& path);

  Grammar& g_;
  const nlohmann::ordered_json& root_;
  SchemaOptions opt_;
  std::map<std::string, uint32_t> refs_;  // $ref -> its rule
  std::map<std::string, Seq> shared_;     // named shared pieces (ws, string, any value...)
  int depth_ = 0;                         // schemas being compiled, nested
};

// A whole document: ws value ws.
Grammar json_schema_grammar(const nlohmann::ordered_json& schema, const SchemaOptions& opt = {});
// response_format json_object: any JSON object.
Grammar json_object_grammar(const SchemaOptions& opt = {});

}  // namespace dsv4::grammar
