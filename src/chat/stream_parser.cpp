#include "chat/stream_parser.h"

#include <algorithm>

#include "chat/dsml.h"
#include "chat/py_json.h"
#include "chat/templates.h"
#include "core/error.h"
#include "tokenizer/utf8.h"

namespace dsv4::chat {
namespace {

enum class Match { No, Partial, Full };

// Whether `lit` occurs at s[i] (Full), or s ends with a proper prefix of it there (Partial).
Match match_at(std::string_view s, size_t i, std::string_view lit) {
  size_t n = std::min(lit.size(), s.size() - i);
  if (s.compare(i, n, lit, 0, n) != 0) return Match::No;
  return n == lit.size() ? Match::Full : Match::Partial;
}

struct Hit {
  size_t at = std::string_view::npos;  // where the first full or partial match starts (npos: none)
  int which = -1;                      // index of the fully matched pattern, -1 for a partial one
};

// The first position from `from` where any pattern matches fully or starts a partial match at the end.
Hit scan(std::string_view s, size_t from, std::initializer_list<std::string_view> patterns) {
  bool first_byte[256] = {};
  for (std::string_view p : patterns) first_byte[static_cast<unsigned char>(p[0])] = true;
  for (size_t i = from; i < s.size(); ++i) {
    if (!first_byte[static_cast<unsigned char>(s[i])]) continue;
    int k = 0;
    bool partial = false;
    for (std::string_view p : patterns) {
      Match m = match_at(s, i, p);
      if (m == Match::Full) return {i, k};
      partial = partial || m == Match::Partial;
      ++k;
    }
    if (partial) return {i, -1};
  }
  return {};
}

StreamEvent event(StreamEventKind kind, std::string text, int tool_index = -1) {
  StreamEvent e;
  e.kind = kind;
  e.text = std::move(text);
  e.tool_index = tool_index;
  return e;
}

}  // namespace

StreamParser::StreamParser(ThinkingMode mode)
    : mode_(mode), state_(mode == ThinkingMode::Thinking ? State::Reasoning : State::Content) {}

std::vector<StreamEvent> StreamParser::feed(std::string_view piece) {
  buf_ += piece;
  std::vector<StreamEvent> ev;
  while (step(ev)) {
  }
  return ev;
}

bool StreamParser::step(std::vector<StreamEvent>& ev) {
  const State before = state_;
  bool progressed = dispatch(ev);
  if (state_ != before) scan_ = 0;
  return progressed;
}

bool StreamParser::dispatch(std::vector<StreamEvent>& ev) {
  switch (state_) {
    case State::Reasoning:
    case State::Content: return step_delta(ev);
    case State::ToolCallsOpen:
    case State::AfterParam:
    case State::AfterToolCalls:
    case State::Ended: return step_expect(ev);
    case State::InvokeHeader: return step_invoke_header(ev);
    case State::ParamHeader: return step_param_header(ev);
    case State::ParamValue: return step_param_value(ev);
    case State::Failed: return false;
  }
  return false;
}

void StreamParser::emit_delta(std::vector<StreamEvent>& ev, size_t end) {
  if (end <= pos_) return;
  std::string text = buf_.substr(pos_, end - pos_);
  pos_ = end;
  const bool reasoning = state_ == State::Reasoning;
  (reasoning ? reasoning_ : content_) += text;
  ev.push_back(event(reasoning ? StreamEventKind::ReasoningDelta : StreamEventKind::ContentDelta, std::move(text)));
}

void StreamParser::emit_args(std::vector<StreamEvent>& ev, std::string text) {
  if (text.empty()) return;
  calls_.back().arguments += text;
  ev.push_back(event(StreamEventKind::ToolCallArgumentsDelta, std::move(text), int(calls_.size()) - 1));
}

// Reasoning: until </think>. Content: until EOS or the tool-calls block. Any other special-token text
// (or the tool-calls block inside reasoning) makes the whole text invalid.
bool StreamParser::step_delta(std::vector<StreamEvent>& ev) {
  const bool reasoning = state_ == State::Reasoning;
  Hit h = reasoning ? scan(buf_, pos_, {kThinkEnd, kToolCallsStart, kBos, kEos, kThinkStart, kDsml})
                    : scan(buf_, pos_, {kEos, kToolCallsStart, kBos, kThinkStart, kThinkEnd, kDsml});
  if (h.at == std::string_view::npos) {
    emit_delta(ev, buf_.size() - utf8::incomplete_tail_len(std::string_view(buf_).substr(pos_)));
    return false;
  }
  emit_delta(ev, h.at);
  if (h.which < 0) return false;  // a partial match at the end: wait for more text
  if (reasoning) {
    if (h.which != 0) {
      state_ = State::Failed;
      return false;
    }
    pos_ += kThinkEnd.size();
    state_ = State::Content;
    return true;
  }
  if (h.which == 0) {
    pos_ += kEos.size();
    state_ = State::Ended;
  } else if (h.which == 1) {
    pos_ += kToolCallsStart.size();
    state_ = State::ToolCallsOpen;
  } else {
    state_ = State::Failed;
  }
  return h.which <= 1;
}

// States whose text is fixed: ">\n" and then one of two tags, the EOS text, or nothing at all.
bool StreamParser::step_expect(std::vector<StreamEvent>& ev) {
  std::string_view s = buf_;
  size_t i = pos_;
  std::string_view tag_a, tag_b;
  if (state_ == State::AfterToolCalls) {
    tag_a = kEos;
  } else if (state_ == State::Ended) {
    if (s.size() > pos_) state_ = State::Failed;
    return false;
  } else {
    Match m = match_at(s, i, ">\n");
    if (m != Match::Full) {
      if (m == Match::No && s.size() > i) state_ = State::Failed;
      return false;
    }
    i += 2;
    tag_a = state_ == State::ToolCallsOpen ? kInvokeOpen : kParamOpen;
    tag_b = state_ == State::ToolCallsOpen ? kToolCallsClose : kInvokeClose;
  }
  if (i >= s.size()) return false;
  Match a = match_at(s, i, tag_a), b = tag_b.empty() ? Match::No : match_at(s, i, tag_b);
  if (a == Match::No && b == Match::No) {
    state_ = State::Failed;
    return false;
  }
  if (a != Match::Full && b != Match::Full) return false;
  pos_ = i + (a == Match::Full ? tag_a.size() : tag_b.size());
  if (state_ == State::AfterToolCalls) {
    state_ = State::Ended;
  } else if (state_ == State::ToolCallsOpen) {
    state_ = a == Match::Full ? State::InvokeHeader : State::AfterToolCalls;
  } else if (a == Match::Full) {  // AfterParam, another parameter
    state_ = State::ParamHeader;
  } else {  // AfterParam, end of the invoke
    emit_args(ev, "}");
    state_ = State::ToolCallsOpen;
  }
  return true;
}

bool StreamParser::step_invoke_header(std::vector<StreamEvent>& ev) {
  Hit h = scan(buf_, std::max(pos_, scan_), {kParamOpen, kInvokeClose});
  if (h.which < 0) {
    scan_ = h.at == std::string_view::npos ? buf_.size() : h.at;
    return false;
  }
  std::string name;
  if (!parse_invoke_name(std::string_view(buf_).substr(pos_, h.at - pos_), &name)) {
    state_ = State::Failed;
    return false;
  }
  calls_.push_back({name, ""});
  param_names_.clear();
  ev.push_back(event(StreamEventKind::ToolCallStart, name, int(calls_.size()) - 1));
  emit_args(ev, "{");
  if (h.which == 0) {
    pos_ = h.at + kParamOpen.size();
    state_ = State::ParamHeader;
  } else {
    pos_ = h.at + kInvokeClose.size();
    emit_args(ev, "}");
    state_ = State::ToolCallsOpen;
  }
  return true;
}

// ` name="NAME" string="true|false">`: the first such marker fixes name and type (as the reference's
// lazy regex does); the end of the parameter before any marker is an error.
bool StreamParser::step_param_header(std::vector<StreamEvent>& ev) {
  constexpr std::string_view open = " name=\"", kTrue = "\" string=\"true\">", kFalse = "\" string=\"false\">";
  Match m = match_at(buf_, pos_, open);
  if (m != Match::Full) {
    if (m == Match::No && buf_.size() > pos_) state_ = State::Failed;
    return false;
  }
  const size_t name_at = pos_ + open.size();
  Hit h = scan(buf_, std::max(name_at, scan_), {kTrue, kFalse, kParamEnd});
  if (h.which < 0) {
    scan_ = h.at == std::string_view::npos ? buf_.size() : h.at;
    return false;
  }
  if (h.which == 2) {
    state_ = State::Failed;
    return false;
  }
  std::string name = buf_.substr(name_at, h.at - name_at);
  if (std::find(param_names_.begin(), param_names_.end(), name) != param_names_.end()) {
    state_ = State::Failed;
    return false;
  }
  value_is_string_ = h.which == 0;
  emit_args(ev, dsml_argument_prefix(name, value_is_string_, param_names_.empty()));
  param_names_.push_back(std::move(name));
  pos_ = h.at + (value_is_string_ ? kTrue.size() : kFalse.size());
  state_ = State::ParamValue;
  return true;
}

// The value runs to "<" + "/｜DSML｜parameter" (or "<\n" + it); a bare "/｜DSML｜parameter" is an error.
bool StreamParser::step_param_value(std::vector<StreamEvent>& ev) {
  static const std::string kLt = "<" + std::string(kParamEnd), kLtNl = "<\n" + std::string(kParamEnd);
  Hit h = scan(buf_, pos_, {kLt, kLtNl, kParamEnd});
  size_t end = h.at;
  if (end == std::string_view::npos) end = buf_.size() - utf8::incomplete_tail_len(std::string_view(buf_).substr(pos_));
  if (h.which == 2) {
    state_ = State::Failed;
    return false;
  }
  std::string value = buf_.substr(pos_, end - pos_);
  pos_ = end;
  if (value_is_string_) {
    std::string escaped;
    py_escape_append(escaped, value);
    value = std::move(escaped);
  }
  if (h.which < 0) {
    emit_args(ev, std::move(value));
    return false;
  }
  emit_args(ev, value + dsml_argument_suffix(value_is_string_));
  pos_ = h.at + (h.which == 0 ? kLt.size() : kLtNl.size());
  state_ = State::AfterParam;
  return true;
}

std::vector<StreamEvent> StreamParser::finish() {
  ParsedMessage msg;
  try {
    msg = parse_completion(buf_, mode_);
  } catch (const Error&) {
    state_ = State::Failed;
    throw;
  }
  std::vector<StreamEvent> ev;
  auto rest = [](const std::string& streamed, const std::string& final_text) {
    return final_text.compare(0, streamed.size(), streamed) == 0 ? final_text.substr(streamed.size()) : std::string();
  };
  if (std::string r = rest(reasoning_, msg.reasoning_content); !r.empty())
    ev.push_back(event(StreamEventKind::ReasoningDelta, std::move(r)));
  if (std::string c = rest(content_, msg.content); !c.empty()) ev.push_back(event(StreamEventKind::ContentDelta, std::move(c)));
  for (size_t i = 0; i < msg.tool_calls.size(); ++i) {
    const ToolCall& call = msg.tool_calls[i];
    std::string args = call.arguments;
    if (i < calls_.size()) {
      args = rest(calls_[i].arguments, call.arguments);
    } else {
      ev.push_back(event(StreamEventKind::ToolCallStart, call.name, int(i)));
    }
    if (!args.empty()) ev.push_back(event(StreamEventKind::ToolCallArgumentsDelta, std::move(args), int(i)));
  }
  state_ = State::Ended;
  StreamEvent done = event(StreamEventKind::Done, "");
  done.message = std::move(msg);
  ev.push_back(std::move(done));
  return ev;
}

}  // namespace dsv4::chat
