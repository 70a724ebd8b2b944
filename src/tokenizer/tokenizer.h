// A Hugging Face `tokenizer.json` tokenizer of the kind DeepSeek-V4 ships (FORMATS.md §6): byte-level
// BPE with ranked merges, added tokens matched by content before pre-tokenization, a pre-tokenizer
// Sequence of Split(regex) + ByteLevel run with PCRE2, and the ByteLevel decoder.
//
// encode(text) never adds BOS/EOS (tokenizer_config.json says add_bos_token=false for V4; the chat
// encoder writes BOS as text and the text of special tokens is recognised inside any input). Special
// token ids are looked up by content, never assumed.
//
// Invalid UTF-8 is encoded losslessly: each maximal run of bytes that are not valid UTF-8 becomes one
// pre-token of its own, so decode(encode(s)) == s for every byte string.
#pragma once
#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace dsv4 {

class Tokenizer {
 public:
  // Loads DIR/tokenizer.json and, if present, DIR/tokenizer_config.json (BOS/EOS/PAD names).
  // Throws dsv4::Error with a one-line message naming the file and field on any problem.
  static Tokenizer load(const std::filesystem::path& dir);

  // The same from file contents; `name` is used in error messages. `config_json` may be empty.
  static Tokenizer from_json(std::string_view tokenizer_json, std::string_view config_json = {},
                             const std::string& name = "tokenizer.json");

  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;
  ~Tokenizer();

  // Token ids of `text` (any bytes). Thread-safe.
  std::vector<int32_t> encode(std::string_view text) const;

  // The bytes the ids stand for, concatenated (not repaired: a cut multi-byte character stays cut;
  // StreamDecoder gives valid UTF-8 incrementally). skip_special drops added tokens marked special.
  // Throws dsv4::Error on an id outside [0, vocab_size) or without a token.
  std::string decode(std::span<const int32_t> ids, bool skip_special = false) const;

  // Bytes of one token (the content for added tokens). Throws on an unknown id.
  std::string token_bytes(int32_t id) const;

  // Id of an added token with exactly this content, else of the vocabulary entry with exactly these
  // bytes; nullopt when neither exists.
  std::optional<int32_t> token_id(std::string_view content) const;

  bool is_special(int32_t id) const;  // an added token with special=true
  int32_t vocab_size() const;         // 1 + the largest id in the vocabulary and added tokens

  // From tokenizer_config.json (nullopt when not configured or not a token).
  std::optional<int32_t> bos_id() const;
  std::optional<int32_t> eos_id() const;
  std::optional<int32_t> pad_id() const;

  struct Impl;  // opaque (tokenizer_impl.h)

 private:
  explicit Tokenizer(std::unique_ptr<Impl> impl);
  static Tokenizer from_json_checked(std::string_view tokenizer_json, std::string_view config_json,
                                     const std::string& name);
  std::unique_ptr<Impl> impl_;
};

// Turns generated ids into text piece by piece, emitting only complete UTF-8 characters: bytes of a
// character split across tokens are held back until it completes; bytes that can never form a valid
// character come out as U+FFFD. Every returned string is valid UTF-8.
class StreamDecoder {
 public:
  explicit StreamDecoder(const Tokenizer& tok, bool skip_special = false) : tok_(&tok), skip_special_(skip_special) {}

  std::string push(int32_t id);  // text completed by this token (possibly empty)
  std::string flush();           // the held-back rest (U+FFFD for an unfinished character); resets

 private:
  std::string take_complete();
  const Tokenizer* tok_;
  bool skip_special_;
  std::string pending_;
};

}  // namespace dsv4
