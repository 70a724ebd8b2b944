// Internal state of dsv4::Tokenizer, shared by the loader (tokenizer_load.cpp) and encode/decode
// (tokenizer.cpp). Not part of the public interface.
#pragma once
#include <optional>
#include <string>
#include <vector>

#include "tokenizer/added_tokens.h"
#include "tokenizer/bpe.h"
#include "tokenizer/pre_tokenizer.h"
#include "tokenizer/tokenizer.h"

namespace dsv4 {

struct Tokenizer::Impl {
  enum Kind : uint8_t { kNone, kVocab, kAdded, kSpecial };

  tok::PreTokenizer pre;
  std::unique_ptr<tok::BpeModel> bpe;
  tok::AddedTokenMatcher added;
  tok::StringIdMap added_by_content;
  std::vector<std::string> text;  // id -> bytes (vocabulary) or content (added tokens)
  std::vector<uint8_t> kind;      // id -> Kind
  std::optional<int32_t> bos, eos, pad;
};

}  // namespace dsv4
