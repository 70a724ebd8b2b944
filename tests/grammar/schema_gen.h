// Generated JSON Schemas of mixed features (objects with required / optional properties and
// additionalProperties, arrays with min / max items, anyOf / oneOf over distinct types, $ref into
// $defs, const, string lengths, patterns and formats, enums): the acceptance property's inputs
// (tests/grammar/test_property.cpp on random logits, tests/runtime/test_grammar_rows.cpp through the
// bundled model).
#pragma once
#include <cstdint>
#include <random>
#include <string>

#include <nlohmann/json.hpp>

namespace dsv4::test {

class SchemaGen {
 public:
  using json = nlohmann::ordered_json;
  explicit SchemaGen(uint64_t seed) : rng_(seed) {}
  json root() {
    json defs = json::object();
    json s = node(0, defs);
    if (!defs.empty()) s = {{"$defs", defs}, {"anyOf", {s, {{"$ref", "#/$defs/d0"}}}}};
    return s;
  }

 private:
  int pick(int n) { return int(rng_() % uint64_t(n)); }
  json scalar() {
    switch (pick(9)) {
      case 0: return {{"type", "null"}};
      case 1: return {{"type", "boolean"}};
      case 2: return {{"type", "integer"}};
      case 3: return {{"type", "number"}};
      case 4: return {{"type", "string"}};
      case 5: return {{"type", "string"}, {"maxLength", pick(6)}, {"minLength", 0}};
      case 6: {
        static const char* pats[] = {"^[a-f]{2,4}$", "^(ab|cd)+\\d?$", "x[0-9]", "^[A-Z][a-z]*$", "^\\w{1,3}-\\d$"};
        return {{"type", "string"}, {"pattern", pats[pick(5)]}};
      }
      case 7: {
        static const char* fmts[] = {"date", "time", "date-time", "uuid", "ipv4", "email"};
        return {{"type", "string"}, {"format", fmts[pick(6)]}};
      }
      default: return {{"enum", json::array({"alpha", 2, nullptr, "b\"q", json::array({1})})}};
    }
  }
  json node(int depth, json& defs) {
    const int kind = depth >= 3 ? 0 : pick(7);
    switch (kind) {
      case 1: {  // object
        json props = json::object();
        json req = json::array();
        const int n = pick(4);
        for (int i = 0; i < n; ++i) {
          const std::string k = "k" + std::to_string(i);
          props[k] = node(depth + 1, defs);
          if (pick(2)) req.push_back(k);
        }
        json o = {{"type", "object"}, {"properties", props}, {"required", req}};
        if (n == 0 && pick(2)) o["additionalProperties"] = node(depth + 1, defs);
        else o["additionalProperties"] = false;
        return o;
      }
      case 2: {  // array
        json a = {{"type", "array"}, {"items", node(depth + 1, defs)}};
        const int lo = pick(3);
        if (pick(2)) a["minItems"] = lo;
        if (pick(2)) a["maxItems"] = lo + pick(3);
        return a;
      }
      case 3:  // anyOf / oneOf over different types (so that exactly one branch matches)
        return {{pick(2) ? "anyOf" : "oneOf", json::array({{{"type", "integer"}}, {{"type", "string"}, {"maxLength", 4}},
                                                             {{"type", "array"}, {"items", scalar()}, {"maxItems", 2}}})}};
      case 4: {  // $ref to a definition
        const std::string name = "d" + std::to_string(defs.size());
        defs[name] = nullptr;  // reserves the name before the definition's own definitions
        json d = node(depth + 1, defs);
        defs[name] = d;
        return {{"$ref", "#/$defs/" + name}};
      }
      case 5: return {{"const", json::object({{"c", pick(10)}})}};
      default: return scalar();
    }
  }
  std::mt19937_64 rng_;
};

}  // namespace dsv4::test
