#include "tokenizer/pre_tokenizer.h"

#include <nlohmann/json.hpp>

#include "core/error.h"

namespace dsv4::tok {
namespace {

// The GPT-2 pattern ByteLevel uses when use_regex is true.
constexpr std::string_view kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

SplitBehavior parse_behavior(const nlohmann::json& j, const std::string& where) {
  std::string b = j.is_string() ? j.get<std::string>() : "";
  if (b == "Removed") return SplitBehavior::Removed;
  if (b == "Isolated") return SplitBehavior::Isolated;
  if (b == "MergedWithPrevious") return SplitBehavior::MergedWithPrevious;
  if (b == "MergedWithNext") return SplitBehavior::MergedWithNext;
  if (b == "Contiguous") return SplitBehavior::Contiguous;
  fail(where, ".behavior: unknown split behavior ", j.dump(),
       " (expected Removed, Isolated, MergedWithPrevious, MergedWithNext or Contiguous)");
}

struct Span {
  size_t b, e;
  bool match;
};

// Hugging Face's fold of (span, is_match) runs into pieces for each delimiter behaviour.
std::vector<Span> apply_behavior(const std::vector<Span>& in, SplitBehavior behavior) {
  std::vector<Span> out;
  out.reserve(in.size());
  switch (behavior) {
    case SplitBehavior::Isolated:
      return in;
    case SplitBehavior::Removed:
      for (const Span& s : in)
        if (!s.match) out.push_back(s);
      return out;
    case SplitBehavior::Contiguous: {
      bool prev_match = false;
      for (const Span& s : in) {
        if (s.match && prev_match && !out.empty())
          out.back().e = s.e;
        else
          out.push_back(s);
        prev_match = s.match;
      }
      return out;
    }
    case SplitBehavior::MergedWithPrevious: {
      bool prev_match = false;
      for (const Span& s : in) {
        if (s.match && !prev_match && !out.empty())
          out.back().e = s.e;
        else
          out.push_back(s);
        prev_match = s.match;
      }
      return out;
    }
    case SplitBehavior::MergedWithNext: {
      bool prev_match = false;
      for (size_t i = in.size(); i-- > 0;) {
        const Span& s = in[i];
        if (s.match && !prev_match && !out.empty())
          out.back().b = s.b;
        else
          out.push_back(s);
        prev_match = s.match;
      }
      return {out.rbegin(), out.rend()};
    }
  }
  return out;
}

}  // namespace

PreTokenizer PreTokenizer::from_json(const nlohmann::json& j, const std::string& file) {
  PreTokenizer p;
  if (!j.is_null()) p.add_step(j, file + ": pre_tokenizer");
  return p;
}

void PreTokenizer::add_step(const nlohmann::json& j, const std::string& where) {
  if (!j.is_object() || !j.contains("type") || !j["type"].is_string())
    fail(where, ": expected an object with a string \"type\"");
  const std::string type = j["type"].get<std::string>();
  if (type == "Sequence") {
    const auto& list = j.contains("pretokenizers") ? j["pretokenizers"] : nlohmann::json();
    if (!list.is_array()) fail(where, ".pretokenizers: expected an array");
    for (size_t i = 0; i < list.size(); ++i) add_step(list[i], cat(where, "[", i, "]"));
    return;
  }
  Step step;
  if (type == "Split") {
    const auto& pat = j.contains("pattern") ? j["pattern"] : nlohmann::json();
    if (pat.is_object() && pat.contains("Regex") && pat["Regex"].is_string()) {
      step.regex.emplace_back(pat["Regex"].get<std::string>(), false, where);
    } else if (pat.is_object() && pat.contains("String") && pat["String"].is_string()) {
      step.regex.emplace_back(pat["String"].get<std::string>(), true, where);
    } else {
      fail(where, ".pattern: expected {\"Regex\": \"...\"} or {\"String\": \"...\"}");
    }
    step.behavior = parse_behavior(j.value("behavior", nlohmann::json()), where);
    step.invert = j.value("invert", false);
  } else if (type == "ByteLevel") {
    has_byte_level_ = true;
    step.add_prefix_space = j.value("add_prefix_space", false);
    if (j.value("use_regex", true)) step.regex.emplace_back(kGpt2Pattern, false, where);
    if (!step.add_prefix_space && step.regex.empty()) return;  // a pure byte mapping: nothing to split
  } else {
    fail(where, ": unsupported pre-tokenizer type \"", type, "\" (supported: Sequence, Split, ByteLevel)");
  }
  steps_.push_back(std::move(step));
}

void PreTokenizer::split(std::string_view text, const std::function<void(std::string_view)>& emit) const {
  if (!text.empty()) apply(0, text, emit);
}

void PreTokenizer::apply(size_t k, std::string_view piece, const std::function<void(std::string_view)>& emit) const {
  if (k == steps_.size()) {
    emit(piece);
    return;
  }
  const Step& step = steps_[k];
  std::string prefixed;
  if (step.add_prefix_space && piece.front() != ' ') {
    prefixed.reserve(piece.size() + 1);
    prefixed += ' ';
    prefixed += piece;
    piece = prefixed;
  }
  if (step.regex.empty()) {
    apply(k + 1, piece, emit);
    return;
  }
  const Regex& re = step.regex.front();
  if (step.behavior == SplitBehavior::Isolated && !step.invert) {
    // The common case, without building the span list.
    size_t last = 0;
    re.for_each_match(piece, [&](size_t b, size_t e) {
      if (b > last) apply(k + 1, piece.substr(last, b - last), emit);
      apply(k + 1, piece.substr(b, e - b), emit);
      last = e;
    });
    if (last < piece.size()) apply(k + 1, piece.substr(last), emit);
    return;
  }
  std::vector<Span> spans;
  size_t last = 0;
  re.for_each_match(piece, [&](size_t b, size_t e) {
    if (b > last) spans.push_back({last, b, step.invert});
    spans.push_back({b, e, !step.invert});
    last = e;
  });
  if (last < piece.size()) spans.push_back({last, piece.size(), step.invert});
  for (const Span& s : apply_behavior(spans, step.behavior))
    if (s.e > s.b) apply(k + 1, piece.substr(s.b, s.e - s.b), emit);
}

}  // namespace dsv4::tok
