#include "tokenizer/utf8.h"

namespace dsv4::utf8 {
namespace {

// Number of bytes a sequence with this lead byte has, or 0 for bytes that never start one.
size_t lead_len(uint8_t b) {
  if (b < 0x80) return 1;
  if (b >= 0xC2 && b <= 0xDF) return 2;
  if (b >= 0xE0 && b <= 0xEF) return 3;
  if (b >= 0xF0 && b <= 0xF4) return 4;
  return 0;
}

// Allowed range of the second byte given the lead (this is what excludes overlongs, surrogates and
// code points above U+10FFFF); later continuation bytes are always 0x80..0xBF.
bool second_ok(uint8_t lead, uint8_t b) {
  switch (lead) {
    case 0xE0: return b >= 0xA0 && b <= 0xBF;
    case 0xED: return b >= 0x80 && b <= 0x9F;
    case 0xF0: return b >= 0x90 && b <= 0xBF;
    case 0xF4: return b >= 0x80 && b <= 0x8F;
    default: return b >= 0x80 && b <= 0xBF;
  }
}

// How many bytes starting at s[i] form a valid prefix of a sequence (at most the sequence length).
size_t valid_prefix(std::string_view s, size_t i, size_t* need) {
  uint8_t lead = uint8_t(s[i]);
  size_t n = lead_len(lead);
  *need = n;
  if (n <= 1) return n;
  size_t k = 1;
  while (k < n && i + k < s.size()) {
    uint8_t b = uint8_t(s[i + k]);
    bool ok = k == 1 ? second_ok(lead, b) : (b >= 0x80 && b <= 0xBF);
    if (!ok) break;
    ++k;
  }
  return k;
}

}  // namespace

size_t valid_seq_len(std::string_view s, size_t i) {
  size_t need = 0;
  size_t k = valid_prefix(s, i, &need);
  return (need != 0 && k == need) ? need : 0;
}

size_t incomplete_tail_len(std::string_view s) {
  // A partial character is at most 3 bytes long, so look at the last 3 lead candidates.
  size_t n = s.size();
  for (size_t back = 1; back <= 3 && back <= n; ++back) {
    size_t i = n - back;
    uint8_t b = uint8_t(s[i]);
    if (b >= 0x80 && b <= 0xBF) continue;  // continuation byte: keep looking for the lead
    size_t need = 0;
    size_t k = valid_prefix(s, i, &need);
    return (need > back && k == back) ? back : 0;
  }
  return 0;
}

bool is_valid(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    if (uint8_t(s[i]) < 0x80) {
      ++i;
      continue;
    }
    size_t n = valid_seq_len(s, i);
    if (n == 0) return false;
    i += n;
  }
  return true;
}

uint32_t decode(std::string_view s, size_t i, size_t* len) {
  uint8_t b0 = uint8_t(s[i]);
  if (b0 < 0x80) {
    *len = 1;
    return b0;
  }
  size_t n = lead_len(b0);
  *len = n;
  uint32_t cp = b0 & (n == 2 ? 0x1F : n == 3 ? 0x0F : 0x07);
  for (size_t k = 1; k < n; ++k) cp = (cp << 6) | (uint8_t(s[i + k]) & 0x3F);
  return cp;
}

void append(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out += char(cp);
  } else if (cp < 0x800) {
    out += char(0xC0 | (cp >> 6));
    out += char(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += char(0xE0 | (cp >> 12));
    out += char(0x80 | ((cp >> 6) & 0x3F));
    out += char(0x80 | (cp & 0x3F));
  } else {
    out += char(0xF0 | (cp >> 18));
    out += char(0x80 | ((cp >> 12) & 0x3F));
    out += char(0x80 | ((cp >> 6) & 0x3F));
    out += char(0x80 | (cp & 0x3F));
  }
}

std::string lossy(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  size_t i = 0;
  while (i < s.size()) {
    size_t need = 0;
    size_t k = valid_prefix(s, i, &need);
    if (need != 0 && k == need) {
      out.append(s.substr(i, k));
      i += k;
    } else {
      // A maximal invalid subpart: the valid-looking prefix (or the single bad byte).
      out.append(kReplacement);
      i += k == 0 ? 1 : k;
    }
  }
  return out;
}

}  // namespace dsv4::utf8
