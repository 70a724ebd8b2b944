// Tokenizer throughput (MB/s of input text, one core): tinyshakespeare.txt, and a generated 1 MB mix of
// Chinese/Japanese text, source code and emoji; each warm (pre-token cache filled) and cold (a fresh
// tokenizer per iteration); plus one 100k-character run. Run:
//   build/bench/bench_tokenizer [--benchmark_filter=...]
// Uses the bundled models/tiny-shakespeare tokenizer (the DeepSeek-V4 pre-tokenizer and special tokens
// with a small vocabulary); $DSV4_TOKENIZER_DIR selects another model directory.
#include <benchmark/benchmark.h>

#include <cstdlib>
#include <fstream>
#include <random>
#include <sstream>

#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"

namespace {

std::string model_dir() {
  const char* env = std::getenv("DSV4_TOKENIZER_DIR");
  return env && *env ? env : std::string(DSV4_SOURCE_DIR) + "/models/tiny-shakespeare";
}

const dsv4::Tokenizer& tokenizer() {
  static const dsv4::Tokenizer t = dsv4::Tokenizer::load(model_dir());
  return t;
}

const std::string& shakespeare() {
  static const std::string text = [] {
    std::ifstream f(std::string(DSV4_SHARED_DIR) + "/data/tinyshakespeare.txt", std::ios::binary);
    std::ostringstream ss;
    ss << f.rdbuf();
    return ss.str();
  }();
  return text;
}

// About 1 MB: paragraphs of random common CJK characters with punctuation, kana, code snippets and
// emoji (with skin tones and ZWJ families), some English; fixed seed.
const std::string& mix() {
  static const std::string text = [] {
    std::mt19937 rng(1234);
    auto pick = [&](int n) { return int(rng() % uint32_t(n)); };
    const char* code[] = {
        "def f(x):\n    return [i * i for i in range(x) if i % 3 == 0]\n",
        "for (int i = 0; i < n; ++i) { sum += a[i] * b[i]; }\n",
        "const auto it = std::find_if(v.begin(), v.end(), [](int x) { return x > 42; });\n",
        "if err != nil {\n\treturn fmt.Errorf(\"open %s: %w\", path, err)\n}\n",
        "<div class=\"card\"><a href=\"https://example.com/a?b=1&c=2\">link</a></div>\n",
        "SELECT id, name FROM users WHERE created_at > '2026-01-01' ORDER BY id DESC;\n"};
    const char* emoji[] = {"😀", "👍🏽", "🇫🇷", "👨‍👩‍👧", "🚀", "❤️", "🎉", "🤔", "🌍"};
    const char* english[] = {"The quick brown fox jumps over the lazy dog. ", "Tokenizers split text into pieces. ",
                             "Numbers like 3.14159 and 1,234,567 appear too. "};
    std::string out;
    while (out.size() < (1u << 20)) {
      switch (pick(5)) {
        case 0:
        case 1:
          for (int i = 0, n = 20 + pick(80); i < n; ++i) {
            dsv4::utf8::append(out, 0x4E00 + uint32_t(pick(0x5000)));
            if (pick(12) == 0) out += pick(2) ? "，" : "。";
          }
          break;
        case 2:
          for (int i = 0, n = 10 + pick(40); i < n; ++i) dsv4::utf8::append(out, 0x3041 + uint32_t(pick(0x5E)));
          out += "、カタカナ";
          break;
        case 3: out += code[pick(6)]; break;
        case 4:
          out += english[pick(3)];
          for (int i = 0, n = 1 + pick(4); i < n; ++i) out += emoji[pick(9)];
          out += ' ';
          break;
      }
      if (pick(6) == 0) out += "\n\n";
    }
    return out;
  }();
  return text;
}

void encode_warm(benchmark::State& state, const std::string& text) {
  const dsv4::Tokenizer& t = tokenizer();
  size_t tokens = 0;
  for (auto _ : state) {
    auto ids = t.encode(text);
    tokens = ids.size();
    benchmark::DoNotOptimize(ids.data());
  }
  state.SetBytesProcessed(int64_t(state.iterations()) * int64_t(text.size()));
  state.counters["tokens"] = double(tokens);
}

void encode_cold(benchmark::State& state, const std::string& text) {
  for (auto _ : state) {
    state.PauseTiming();
    auto t = std::make_unique<dsv4::Tokenizer>(dsv4::Tokenizer::load(model_dir()));
    state.ResumeTiming();
    auto ids = t->encode(text);
    benchmark::DoNotOptimize(ids.data());
    state.PauseTiming();
    t.reset();
    state.ResumeTiming();
  }
  state.SetBytesProcessed(int64_t(state.iterations()) * int64_t(text.size()));
}

void BM_Shakespeare(benchmark::State& s) { encode_warm(s, shakespeare()); }
void BM_ShakespeareCold(benchmark::State& s) { encode_cold(s, shakespeare()); }
void BM_Mix(benchmark::State& s) { encode_warm(s, mix()); }
void BM_MixCold(benchmark::State& s) { encode_cold(s, mix()); }
void BM_RunOf100kA(benchmark::State& s) {
  static const std::string text(100000, 'a');
  encode_warm(s, text);
}

void BM_Decode(benchmark::State& state) {
  const dsv4::Tokenizer& t = tokenizer();
  const auto ids = t.encode(shakespeare());
  for (auto _ : state) {
    std::string s = t.decode(ids);
    benchmark::DoNotOptimize(s.data());
  }
  state.SetBytesProcessed(int64_t(state.iterations()) * int64_t(shakespeare().size()));
}

BENCHMARK(BM_Shakespeare)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_ShakespeareCold)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Mix)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_MixCold)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_RunOf100kA)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Decode)->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
