// A small byte-level BPE tokenizer.json built in code, for tests that need to vary one field.
#pragma once
#include <string>

#include <nlohmann/json.hpp>

#include "tokenizer/byte_level.h"

namespace dsv4::test {

// All 256 byte symbols, merges "a a" -> "aa", "aa aa" -> "aaaa", "h i" -> "hi", added tokens
// <a> (special), <a><b> (special, longer, shares a prefix) and <x> (not special).
inline nlohmann::json tiny_tokenizer_json() {
  nlohmann::json vocab = nlohmann::json::object();
  int id = 0;
  for (int b = 0; b < 256; ++b) vocab[tok::byte_to_symbol(static_cast<unsigned char>(b))] = id++;
  vocab["aa"] = id++;
  vocab["aaaa"] = id++;
  vocab["hi"] = id++;
  nlohmann::json j = {
      {"version", "1.0"},
      {"added_tokens",
       {{{"id", id}, {"content", "<a>"}, {"special", true}, {"normalized", false}},
        {{"id", id + 1}, {"content", "<a><b>"}, {"special", true}, {"normalized", false}},
        {{"id", id + 2}, {"content", "<x>"}, {"special", false}, {"normalized", false}}}},
      {"normalizer", nullptr},
      {"pre_tokenizer",
       {{"type", "Sequence"},
        {"pretokenizers",
         {{{"type", "Split"}, {"pattern", {{"Regex", "\\p{N}{1,3}"}}}, {"behavior", "Isolated"}, {"invert", false}},
          {{"type", "Split"},
           {"pattern", {{"Regex", "\\s+(?!\\S)|\\s+|[^\\s]+"}}},
           {"behavior", "Isolated"},
           {"invert", false}},
          {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}}}}}},
      {"post_processor", nullptr},
      {"decoder", {{"type", "ByteLevel"}}},
      {"model",
       {{"type", "BPE"},
        {"dropout", nullptr},
        {"unk_token", nullptr},
        {"vocab", vocab},
        {"merges", {{"a", "a"}, "aa aa", {"h", "i"}}}}}};
  return j;
}

}  // namespace dsv4::test
