// UTF-8 helpers shared by the tokenizer and the chat parser: validation (RFC 3629: no overlongs, no
// surrogates, nothing above U+10FFFF), code-point decoding, and lossy repair that replaces each
// maximal invalid subpart with U+FFFD (the WHATWG / Rust from_utf8_lossy convention).
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace dsv4::utf8 {

inline constexpr std::string_view kReplacement = "\xEF\xBF\xBD";  // U+FFFD

// Length of the valid UTF-8 sequence starting at s[i], or 0 when the bytes there are not a complete
// valid sequence (invalid lead byte, bad continuation, overlong, surrogate, or truncated by the end).
size_t valid_seq_len(std::string_view s, size_t i);

// Length of the longest prefix of s[i..] that is a proper, still-completable start of a valid sequence
// but is cut off by the end of s (1..3), or 0. Used to hold back a partial character in streams.
size_t incomplete_tail_len(std::string_view s);

bool is_valid(std::string_view s);

// Decodes the code point of the valid sequence at s[i] (caller guarantees validity); sets `len`.
uint32_t decode(std::string_view s, size_t i, size_t* len);

void append(std::string& out, uint32_t cp);

// Copy of s with every maximal invalid subpart replaced by U+FFFD.
std::string lossy(std::string_view s);

}  // namespace dsv4::utf8
