#include "grammar/grammar.h"

#include <algorithm>
#include <functional>

#include "core/error.h"

namespace dsv4::grammar {

void normalize(State& st) {
  std::sort(st.begin(), st.end());
  st.erase(std::unique(st.begin(), st.end()), st.end());
}

uint32_t Grammar::new_rule(std::string name) {
  rules_.emplace_back();
  names_.push_back(std::move(name));
  defined_.push_back(false);
  return uint32_t(rules_.size() - 1);
}

void Grammar::define(uint32_t rule, const std::vector<Seq>& alts) {
  if (rule >= rules_.size() || defined_[rule]) fail("grammar: rule ", rule, " is unknown or defined twice");
  if (alts.empty()) fail("grammar: rule '", names_[rule], "' has no alternatives");
  defined_[rule] = true;
  for (const Seq& s : alts) {
    rules_[rule].push_back(uint32_t(elems_.size()));
    elems_.insert(elems_.end(), s.items.begin(), s.items.end());
    elems_.push_back(Element{});  // End
  }
}

uint32_t Grammar::add_rule(std::string name, const std::vector<Seq>& alts) {
  const uint32_t r = new_rule(std::move(name));
  define(r, alts);
  return r;
}

namespace {

Element element(Element::Kind kind, uint32_t rule, const ByteSet& bytes) {
  Element e;
  e.kind = kind;
  e.rule = rule;
  e.bytes = bytes;
  return e;
}

}  // namespace

Seq Grammar::lit(std::string_view bytes) {
  Seq s;
  for (unsigned char c : bytes) s.items.push_back(element(Element::Kind::Bytes, 0, ByteSet().set(c)));
  return s;
}

Seq Grammar::set(const ByteSet& b) {
  Seq s;
  s.items.push_back(element(Element::Kind::Bytes, 0, b));
  return s;
}

Seq Grammar::ref(uint32_t rule) {
  Seq s;
  s.items.push_back(element(Element::Kind::Ref, rule, {}));
  return s;
}

Seq Grammar::alt(const std::vector<Seq>& alts, const std::string& name) {
  if (alts.size() == 1) return alts[0];
  return ref(add_rule(name, alts));
}

Seq Grammar::star(const Seq& s) {
  const uint32_t r = new_rule("star");
  define(r, {s + ref(r), Seq{}});
  return ref(r);
}

Seq Grammar::repeat(const Seq& s, int64_t min, int64_t max) {
  Seq out;
  for (int64_t i = 0; i < min; ++i) out += s;
  if (max < 0) return out + star(s);
  // Up to max - min more, as nested optionals built from the inside out: opt(s opt(s ...)).
  Seq tail;
  for (int64_t i = min; i < max; ++i) tail = opt(s + tail);
  return out + tail;
}

void Grammar::finish() {
  for (size_t r = 0; r < rules_.size(); ++r)
    if (!defined_[r]) fail("grammar: rule '", names_[r], "' is used but never defined");
  // Nullable rules (fixpoint), then the graph "A may call B before consuming a byte": a cycle in it
  // would make expansion loop forever.
  std::vector<bool> nullable(rules_.size(), false);
  auto alt_nullable = [&](uint32_t p) {
    for (; elems_[p].kind != Element::Kind::End; ++p)
      if (elems_[p].kind == Element::Kind::Bytes || !nullable[elems_[p].rule]) return false;
    return true;
  };
  for (bool changed = true; changed;) {
    changed = false;
    for (size_t r = 0; r < rules_.size(); ++r)
      if (!nullable[r])
        for (uint32_t a : rules_[r])
          if (alt_nullable(a)) {
            nullable[r] = changed = true;
            break;
          }
  }
  std::vector<int> color(rules_.size(), 0);  // 0 new, 1 on the path, 2 done
  std::function<void(uint32_t)> visit = [&](uint32_t r) {
    color[r] = 1;
    for (uint32_t p : rules_[r])
      for (; elems_[p].kind == Element::Kind::Ref; ++p) {
        const uint32_t c = elems_[p].rule;
        if (color[c] == 1) fail("grammar: rule '", names_[c], "' can call itself without consuming input");
        if (color[c] == 0) visit(c);
        if (!nullable[c]) break;
      }
    color[r] = 2;
  };
  for (size_t r = 0; r < rules_.size(); ++r)
    if (color[r] == 0) visit(uint32_t(r));
}

void Grammar::expand_into(Stack& s, State& out, int depth) const {
  if (s.empty() || elems_[s.back()].kind == Element::Kind::Bytes) {
    out.push_back(s);
    return;
  }
  if (depth > 4096) fail("grammar: expansion deeper than 4096 rules");
  const uint32_t p = s.back();
  const Element& e = elems_[p];
  s.pop_back();
  if (elems_[p + 1].kind != Element::Kind::End) s.push_back(p + 1);
  const size_t base = s.size();
  for (uint32_t a : rules_[e.rule]) {
    if (elems_[a].kind != Element::Kind::End) s.push_back(a);
    expand_into(s, out, depth + 1);
    s.resize(base);
  }
  // Restore the caller's stack (it is a scratch copy, but keep the contract simple).
  if (elems_[p + 1].kind != Element::Kind::End) s.pop_back();
  s.push_back(p);
}

void Grammar::expand(Stack s, State& out) const { expand_into(s, out, 0); }

State Grammar::initial() const {
  State st;
  Stack s;
  for (uint32_t a : rules_[root_]) {
    s.clear();
    if (elems_[a].kind != Element::Kind::End) s.push_back(a);
    expand_into(s, st, 0);
  }
  normalize(st);
  return st;
}

void Grammar::advance(const State& in, uint8_t byte, State& out) const {
  out.clear();
  Stack t;
  for (const Stack& s : in) {
    if (s.empty()) continue;
    const uint32_t p = s.back();
    if (!elems_[p].bytes.test(byte)) continue;
    t.assign(s.begin(), s.end() - 1);
    if (elems_[p + 1].kind != Element::Kind::End) t.push_back(p + 1);
    expand_into(t, out, 0);
  }
  normalize(out);
}

bool Grammar::advance_bytes(State& st, std::string_view bytes) const {
  State next;
  for (unsigned char c : bytes) {
    advance(st, c, next);
    st.swap(next);
    if (st.empty()) return false;
  }
  return true;
}

bool Grammar::can_end(const State& st) {
  return std::any_of(st.begin(), st.end(), [](const Stack& s) { return s.empty(); });
}

}  // namespace dsv4::grammar
