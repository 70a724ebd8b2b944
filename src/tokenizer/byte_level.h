// The GPT-2 "byte-level" alphabet: every byte 0..255 is shown as one printable Unicode character
// (printable Latin-1 bytes map to themselves, the rest to U+0100 + k in byte order). Vocabulary and
// merge strings in tokenizer.json are written in this alphabet; the tokenizer works on raw bytes and
// converts the file's strings once at load.
#pragma once
#include <optional>
#include <string>
#include <string_view>

namespace dsv4::tok {

// The UTF-8 spelling of the character that stands for byte b.
const std::string& byte_to_symbol(unsigned char b);

// Converts a string written in the byte-level alphabet back to raw bytes; nullopt when it contains a
// character outside the alphabet (e.g. the text of a special token).
std::optional<std::string> symbols_to_bytes(std::string_view symbols);

}  // namespace dsv4::tok
