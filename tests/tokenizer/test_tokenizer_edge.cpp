// Behaviour beyond the fixtures: empty and invalid UTF-8 input, added tokens inside text, very long
// runs of one character, thread safety, the streaming decoder.
#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "core/error.h"
#include "support/test_paths.h"
#include "tiny_json.h"
#include "tokenizer/regex.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"

namespace {

using dsv4::Tokenizer;
using Ids = std::vector<int32_t>;

const Tokenizer& bundled() {
  static const Tokenizer tok = Tokenizer::load(dsv4::test::bundled_model_dir());
  return tok;
}

Ids concat(std::initializer_list<Ids> parts) {
  Ids out;
  for (const Ids& p : parts) out.insert(out.end(), p.begin(), p.end());
  return out;
}

TEST(TokenizerEdge, EmptyInput) {
  EXPECT_TRUE(bundled().encode("").empty());
  EXPECT_EQ(bundled().decode(Ids{}), "");
}

TEST(TokenizerEdge, InvalidUtf8RoundTripsAndLeavesValidTextAlone) {
  const Tokenizer& t = bundled();
  const std::string bad[] = {"\xff",         "\xfe\xff",     "abc\xC3(def",  "tail\xE4\xBD", "\xED\xA0\x80surrogate",
                             "\xC0\xAFover", "\x80\x80\x80", "mix\xF4\x90\x80\x80z", "ok \xE2\x82\xAC \xE2\x82"};
  for (const std::string& s : bad) {
    SCOPED_TRACE(s);
    Ids ids = t.encode(s);
    EXPECT_FALSE(ids.empty());
    EXPECT_EQ(t.decode(ids), s);
  }
  // The invalid bytes form their own pre-token: the valid text around them tokenizes as on its own.
  EXPECT_EQ(t.encode("Hello\xffworld"), concat({t.encode("Hello"), t.encode("\xff"), t.encode("world")}));
}

TEST(TokenizerEdge, SpecialTokensInsideText) {
  const Tokenizer& t = bundled();
  const int32_t user = *t.token_id("<｜User｜>"), think = *t.token_id("<think>"), end = *t.token_id("</think>");
  EXPECT_EQ(t.encode("x<｜User｜>y"), concat({t.encode("x"), {user}, t.encode("y")}));
  EXPECT_EQ(t.encode("<think></think><think>"), (Ids{think, end, think}));
  EXPECT_EQ(t.encode("word<think>"), concat({t.encode("word"), {think}}));
  // A partial special token is ordinary text.
  Ids partial = t.encode("<｜User");
  EXPECT_EQ(std::count(partial.begin(), partial.end(), user), 0);
  EXPECT_EQ(t.decode(partial), "<｜User");
  // Decoding can drop special tokens; <think> is an added token but not special.
  Ids ids = t.encode("<｜User｜>hi<think>");
  EXPECT_EQ(t.decode(ids, /*skip_special=*/true), "hi<think>");
}

TEST(TokenizerEdge, LongestAddedTokenWins) {
  Tokenizer t = Tokenizer::from_json(dsv4::test::tiny_tokenizer_json().dump());
  const int32_t a = *t.token_id("<a>"), ab = *t.token_id("<a><b>"), x = *t.token_id("<x>");
  EXPECT_EQ(t.encode("<a><b>"), (Ids{ab}));
  EXPECT_EQ(t.encode("<a><a><b>"), (Ids{a, ab}));
  EXPECT_EQ(t.encode("<a><b"), concat({{a}, t.encode("<b")}));
  EXPECT_EQ(t.encode("<x><x>"), (Ids{x, x}));
  EXPECT_EQ(t.decode(t.encode("q<a><b>r<x>s")), "q<a><b>r<x>s");
}

TEST(TokenizerEdge, MergesFollowRankOrder) {
  Tokenizer t = Tokenizer::from_json(dsv4::test::tiny_tokenizer_json().dump());
  const int32_t aa = *t.token_id("aa"), aaaa = *t.token_id("aaaa"), a = *t.token_id("a");
  EXPECT_EQ(t.encode("aaa"), (Ids{aa, a}));  // leftmost pair first among equal ranks
  EXPECT_EQ(t.encode("aaaaa"), (Ids{aaaa, a}));
  EXPECT_EQ(t.encode("aaaaaa"), (Ids{aaaa, aa}));
  EXPECT_EQ(t.encode("hi"), (Ids{*t.token_id("hi")}));
}

TEST(TokenizerEdge, VeryLongRunsAreFast) {
  const Tokenizer& t = bundled();
  for (const std::string& unit : {std::string("a"), std::string(" "), std::string("1"), std::string("\n"),
                                  std::string("你"), std::string("!"), std::string("😀")}) {
    std::string s;
    for (int i = 0; i < 100000; ++i) s += unit;
    auto t0 = std::chrono::steady_clock::now();
    Ids ids = t.encode(s);
    double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    SCOPED_TRACE("100k x '" + unit + "'");
    EXPECT_LT(sec, 2.0);  // a quadratic merge loop takes minutes here
    EXPECT_EQ(t.decode(ids), s);
  }
  // With merges a+a and aa+aa a long run becomes blocks of four, in n log n time.
  Tokenizer tiny = Tokenizer::from_json(dsv4::test::tiny_tokenizer_json().dump());
  auto t0 = std::chrono::steady_clock::now();
  Ids ids = tiny.encode(std::string(100001, 'a'));
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 2.0);
  ASSERT_EQ(ids.size(), 25001u);
  EXPECT_EQ(ids.front(), *tiny.token_id("aaaa"));
  EXPECT_EQ(ids.back(), *tiny.token_id("a"));
}

TEST(TokenizerEdge, ConcurrentEncodesAgree) {
  const Tokenizer& t = bundled();
  const std::string text = "ROMEO:\nBut, soft! what light through yonder window breaks? 你好 <think>x</think> 123456";
  const Ids want = t.encode(text);
  std::vector<std::thread> threads;
  std::atomic<int> bad{0};
  for (int k = 0; k < 4; ++k)
    threads.emplace_back([&] {
      for (int r = 0; r < 200; ++r)
        if (t.encode(text) != want) ++bad;
    });
  for (auto& th : threads) th.join();
  EXPECT_EQ(bad.load(), 0);
}

TEST(TokenizerEdge, DecodeRejectsUnknownIds) {
  const Tokenizer& t = bundled();
  EXPECT_THROW(t.decode(Ids{-1}), dsv4::Error);
  EXPECT_THROW(t.decode(Ids{t.vocab_size()}), dsv4::Error);
  EXPECT_THROW(t.token_bytes(1 << 30), dsv4::Error);
}

TEST(StreamDecoder, EmitsOnlyCompleteCharacters) {
  const Tokenizer& t = bundled();
  const std::string text = "你好，世界！😀👍🏽 café 한국어 <think>ok</think>";
  Ids ids = t.encode(text);
  dsv4::StreamDecoder dec(t);
  std::string all;
  int empty_pushes = 0;
  for (int32_t id : ids) {
    std::string piece = dec.push(id);
    EXPECT_TRUE(dsv4::utf8::is_valid(piece));
    if (piece.empty()) ++empty_pushes;
    all += piece;
  }
  all += dec.flush();
  EXPECT_EQ(all, text);
  EXPECT_GT(empty_pushes, 0);  // the tiny vocabulary splits CJK characters across byte tokens
}

TEST(StreamDecoder, ReplacesBytesThatCannotFormACharacter) {
  const Tokenizer& t = bundled();
  dsv4::StreamDecoder dec(t);
  const int32_t lone_cont = t.encode("\x80").at(0), lead3 = t.encode("\xE4").at(0);
  EXPECT_EQ(dec.push(lone_cont), "\xEF\xBF\xBD");
  EXPECT_EQ(dec.push(lead3), "");                     // could still complete
  EXPECT_EQ(dec.push(t.encode("A").at(0)), "\xEF\xBF\xBD" "A");  // it did not
  EXPECT_EQ(dec.push(lead3), "");
  EXPECT_EQ(dec.flush(), "\xEF\xBF\xBD");             // unfinished at the end
  EXPECT_EQ(dec.flush(), "");
}

TEST(StreamDecoder, SkipsSpecialTokensWhenAsked) {
  const Tokenizer& t = bundled();
  dsv4::StreamDecoder dec(t, /*skip_special=*/true);
  std::string all;
  for (int32_t id : t.encode("<｜User｜>hi<｜end▁of▁sentence｜>")) all += dec.push(id);
  EXPECT_EQ(all + dec.flush(), "hi");
}

}  // namespace

namespace {

// Oniguruma's \s (what Hugging Face uses) is Unicode White_Space: U+0085 yes, U+180E and U+200B no.
TEST(TokenizerRegex, WhitespaceMeansUnicodeWhiteSpace) {
  auto matches = [](const char* pattern, const std::string& s) {
    dsv4::tok::Regex re(pattern, false, "test");
    size_t n = 0;
    re.for_each_match(s, [&](size_t b, size_t e) { n += e - b; });
    return n == s.size();
  };
  EXPECT_TRUE(matches("\\s", "\xC2\x85"));
  EXPECT_TRUE(matches("\\s", "\xE3\x80\x80"));        // U+3000
  EXPECT_FALSE(matches("\\s", "\xE1\xA0\x8E"));       // U+180E
  EXPECT_FALSE(matches("\\s", "\xE2\x80\x8B"));       // U+200B
  EXPECT_TRUE(matches("\\S", "\xE1\xA0\x8E"));
  EXPECT_TRUE(matches("[^\\s\\p{L}]", "\xE1\xA0\x8E"));
  EXPECT_FALSE(matches("[^\\s\\p{L}]", "\xC2\x85"));
  EXPECT_TRUE(matches("[\\]\\s]", "]"));
  EXPECT_EQ(dsv4::tok::translate_oniguruma("a\\p{N}[x]\\\\s"), "a\\p{N}[x]\\\\s");  // an escaped backslash, then 's'
}

}  // namespace
