// Structured-output mask cost per decode step (docs/structured-output.md, docs/perf-log.md): the
// allowed-token bitmask of a grammar state plus advancing on the chosen token, on a vocabulary of the
// real DeepSeek-V4 shape (129,280 ids). Run:
//   build/bench/bench_grammar [--benchmark_filter=...]
// $DSV4_TOKENIZER_DIR selects a real tokenizer directory; without it the vocabulary is synthetic:
// 129,280 distinct byte strings built from tinyshakespeare's words (with and without a leading space,
// capitalised), code-like punctuation runs (quotes, braces, commas), digits and CJK characters.
#include <benchmark/benchmark.h>

#include <cstdlib>
#include <fstream>
#include <random>
#include <set>
#include <sstream>

#include "grammar/dsml_grammar.h"
#include "grammar/json_schema.h"
#include "grammar/matcher.h"
#include "tokenizer/tokenizer.h"

namespace {

using namespace dsv4::grammar;
constexpr int64_t kVocab = 129280;

std::shared_ptr<const Vocabulary> vocab() {
  static const auto v = [] {
    if (const char* dir = std::getenv("DSV4_TOKENIZER_DIR"); dir && *dir) {
      const auto tok = dsv4::Tokenizer::load(dir);
      VocabularyOptions o;
      o.vocab_size = kVocab;
      return Vocabulary::from_tokenizer(tok, o);
    }
    std::ifstream f(std::string(DSV4_SHARED_DIR) + "/data/tinyshakespeare.txt");
    std::stringstream ss;
    ss << f.rdbuf();
    std::set<std::string> tokens;
    for (int b = 0; b < 256; ++b) tokens.insert(std::string(1, char(b)));
    std::string w;
    for (char c : ss.str() + " ") {
      if (std::isalpha(uint8_t(c))) {
        w += c;
        continue;
      }
      if (!w.empty()) {
        for (size_t k = 2; k <= w.size(); ++k) tokens.insert(w.substr(0, k));
        tokens.insert(" " + w);
        std::string cap = w;
        cap[0] = char(std::toupper(uint8_t(cap[0])));
        tokens.insert(" " + cap);
        w.clear();
      }
    }
    std::mt19937_64 rng(7);
    const std::string punct = "\"{}[],:.;()'-_=+<>/\\ \n\t";
    const char* cjk[] = {"\xE7\x9A\x84", "\xE4\xB8\x80", "\xE6\x98\xAF", "\xE4\xBA\x86", "\xE6\x88\x91", "\xE4\xBD\xA0"};
    while (int64_t(tokens.size()) < kVocab - 1000) {  // the top 1,000 ids stay special (no text)
      std::string t;
      switch (rng() % 4) {
        case 0:  // punctuation runs: '",', '"}', '{"', '\n  ', ...
          for (size_t n = 1 + rng() % 4; n--;) t += punct[rng() % punct.size()];
          break;
        case 1: t = std::to_string(rng() % 1000); break;
        case 2:
          for (size_t n = 1 + rng() % 3; n--;) t += cjk[rng() % 6];
          break;
        default:  // letter strings, some with a leading space or a trailing quote
          if (rng() % 2) t = " ";
          for (size_t n = 2 + rng() % 8; n--;) t += char('a' + rng() % 26);
          if (rng() % 10 == 0) t += "\",";
      }
      tokens.insert(t);
    }
    std::vector<std::string> bytes(tokens.begin(), tokens.end());
    bytes.resize(size_t(kVocab));
    return std::make_shared<const Vocabulary>(std::move(bytes));
  }();
  return v;
}

const nlohmann::ordered_json& schema() {
  static const auto s = nlohmann::ordered_json::parse(R"({"type":"object","properties":{
    "name":{"type":"string"},"age":{"type":"integer"},"email":{"type":"string","format":"email"},
    "tags":{"type":"array","items":{"type":"string"},"maxItems":8},
    "address":{"type":"object","properties":{"street":{"type":"string"},"zip":{"type":"string","pattern":"^[0-9]{5}$"}},
    "required":["street","zip"]},"score":{"type":"number"}},"required":["name","age","tags","address"]})");
  return s;
}

// Steady state: mask + an allowed token + advance, per iteration, along sampled outputs (the
// grammar restarts when it ends). The cache fills during the first outputs, as in a server.
void run_steps(benchmark::State& state, const std::shared_ptr<const CompiledGrammar>& cg) {
  const int32_t eos = 1;
  std::mt19937_64 rng(1);
  auto m = std::make_unique<Matcher>(cg, std::vector<int32_t>{eos});
  TokenMask mask;
  auto step = [&] {
    m->fill_mask(mask);
    // A random allowed id: the first set bit from a random word on (cheap, so that the time is the
    // mask's and the advance's).
    int32_t id = -1;
    for (size_t k = 0, w0 = rng() % mask.size(); k < mask.size() && id < 0; ++k) {
      const size_t w = (w0 + k) % mask.size();
      if (mask[w]) id = int32_t(w * 32 + std::countr_zero(mask[w]));
    }
    m->accept(id);
    if (m->ended()) m = std::make_unique<Matcher>(cg, std::vector<int32_t>{eos});
  };
  for (int i = 0; i < 3000; ++i) step();  // warm the cache
  for (auto _ : state) step();
  state.counters["cached_entries"] = double(cg->cached_entries());
}

// Tools: a forced call of two tools (the DSML block under their schemas), and tool_choice "auto" with
// a strict tool (free content, then the block).
std::vector<ToolSchema> tools() {
  const auto weather = nlohmann::ordered_json::parse(R"({"type":"object","properties":{
    "city":{"type":"string"},"days":{"type":"integer"},"unit":{"enum":["c","f"]}},"required":["city","days"]})");
  return {{"weather", weather, true}, {"add", schema()["properties"]["address"], true}};
}

void BM_MaskStep_JsonSchema(benchmark::State& state) {
  run_steps(state, std::make_shared<const CompiledGrammar>(json_schema_grammar(schema()), vocab()));
}
void BM_MaskStep_JsonObject(benchmark::State& state) {
  run_steps(state, std::make_shared<const CompiledGrammar>(json_object_grammar(), vocab()));
}

void BM_MaskStep_ForcedToolCall(benchmark::State& state) {
  run_steps(state, std::make_shared<const CompiledGrammar>(dsml_tool_calls_grammar(tools(), true), vocab()));
}
void BM_MaskStep_AutoStrictTools(benchmark::State& state) {
  run_steps(state, std::make_shared<const CompiledGrammar>(dsml_auto_tools_grammar(tools(), true), vocab()));
}

// First use of a grammar: compile, then the mask inside the first string value (the costliest cache
// entry: nearly the whole vocabulary is walked once).
void BM_ColdFirstStringMask(benchmark::State& state) {
  for (auto _ : state) {
    auto cg = std::make_shared<const CompiledGrammar>(json_schema_grammar(schema()), vocab());
    Matcher m(cg, {1});
    for (char c : std::string("{\"name\":\"")) {
      TokenMask mask;
      m.fill_mask(mask);
      for (int32_t id = 0; id < int32_t(cg->vocab().size()); ++id)
        if (cg->vocab().bytes(id) == std::string(1, c)) {
          m.accept(id);
          break;
        }
    }
    TokenMask mask;
    m.fill_mask(mask);
    benchmark::DoNotOptimize(mask.data());
  }
}

}  // namespace

BENCHMARK(BM_MaskStep_JsonSchema)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_MaskStep_JsonObject)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_MaskStep_ForcedToolCall)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_MaskStep_AutoStrictTools)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_ColdFirstStringMask)->Unit(benchmark::kMillisecond)->Iterations(3);
BENCHMARK_MAIN();
