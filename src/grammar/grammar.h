// A byte-level context-free grammar and its pushdown recognizer (docs/structured-output.md).
//
// A grammar is a set of rules; each rule is a list of alternatives; each alternative is a sequence of
// elements: a byte set (matches one byte) or a reference to a rule. All alternatives live in one flat
// element array, each terminated by an End element, so that a position (an index into that array)
// names "the rest of this alternative". A parse state is a set of stacks of positions: the top is the
// byte set to match next, the entries below are where each calling rule continues. An empty stack is
// a complete parse. Rules must not be left-recursive and no cycle of rules may match the empty string
// (the JSON Schema compiler never builds one; Grammar::finish checks the second).
#pragma once
#include <bitset>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace dsv4::grammar {

using ByteSet = std::bitset<256>;

struct Element {
  enum class Kind : uint8_t { Bytes, Ref, End };
  Kind kind = Kind::End;
  uint32_t rule = 0;  // Ref: the rule called
  ByteSet bytes;      // Bytes: the bytes accepted
};

using Stack = std::vector<uint32_t>;  // positions, the top last
using State = std::vector<Stack>;     // sorted, unique

// One alternative under construction: a sequence of byte sets and rule references.
struct Seq {
  std::vector<Element> items;
  Seq() = default;
  Seq& operator+=(const Seq& o) {
    items.insert(items.end(), o.items.begin(), o.items.end());
    return *this;
  }
  friend Seq operator+(Seq a, const Seq& b) { return a += b; }
};

class Grammar {
 public:
  // Building. new_rule reserves an id (so that rules can refer to each other before their definition);
  // define gives it its alternatives (an empty Seq is the empty string).
  uint32_t new_rule(std::string name);
  void define(uint32_t rule, const std::vector<Seq>& alts);
  uint32_t add_rule(std::string name, const std::vector<Seq>& alts);  // new_rule + define
  void set_root(uint32_t rule) { root_ = rule; }
  // Checks that every rule is defined and that no rule calls itself without consuming a byte; throws
  // dsv4::Error naming the rule.
  void finish();

  // Sequence helpers.
  static Seq lit(std::string_view bytes);
  static Seq set(const ByteSet& s);
  static Seq ref(uint32_t rule);
  Seq alt(const std::vector<Seq>& alts, const std::string& name = "alt");  // a new rule, referenced
  Seq opt(const Seq& s) { return alt({s, Seq{}}, "opt"); }
  Seq star(const Seq& s);                       // zero or more (right recursion: constant stack)
  Seq repeat(const Seq& s, int64_t min, int64_t max);  // max < 0: unbounded

  // Recognition.
  State initial() const;
  // The states after consuming one byte (empty: the byte is not allowed).
  void advance(const State& in, uint8_t byte, State& out) const;
  bool advance_bytes(State& st, std::string_view bytes) const;  // false (st empty) when rejected
  static bool can_end(const State& st);  // some stack is complete
  // All stacks reached from `s` by resolving references until a byte set (or nothing) is on top.
  void expand(Stack s, State& out) const;

  const std::vector<Element>& elements() const { return elems_; }
  size_t rule_count() const { return rules_.size(); }
  const std::string& rule_name(uint32_t r) const { return names_[r]; }

 private:
  void expand_into(Stack& s, State& out, int depth) const;
  std::vector<Element> elems_;
  std::vector<std::vector<uint32_t>> rules_;  // rule -> alternative start positions
  std::vector<std::string> names_;
  std::vector<bool> defined_;
  uint32_t root_ = 0;
};

void normalize(State& st);  // sort + unique

}  // namespace dsv4::grammar
