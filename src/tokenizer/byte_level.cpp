#include "tokenizer/byte_level.h"

#include <array>
#include <cstdint>

#include "tokenizer/utf8.h"

namespace dsv4::tok {
namespace {

struct Tables {
  std::array<std::string, 256> symbol;      // byte -> UTF-8 of its character
  std::array<int16_t, 0x144> byte_of_cp{};  // code point -> byte, or -1 (all code points are < 0x144)

  Tables() {
    byte_of_cp.fill(-1);
    auto printable = [](int b) { return (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF); };
    int next = 0;
    for (int b = 0; b < 256; ++b) {
      uint32_t cp = printable(b) ? uint32_t(b) : uint32_t(0x100 + next++);
      utf8::append(symbol[size_t(b)], cp);
      byte_of_cp[cp] = int16_t(b);
    }
  }
};

const Tables& tables() {
  static const Tables t;
  return t;
}

}  // namespace

const std::string& byte_to_symbol(unsigned char b) { return tables().symbol[b]; }

std::optional<std::string> symbols_to_bytes(std::string_view symbols) {
  const Tables& t = tables();
  std::string out;
  out.reserve(symbols.size());
  size_t i = 0;
  while (i < symbols.size()) {
    size_t len = utf8::valid_seq_len(symbols, i);
    if (len == 0) return std::nullopt;
    uint32_t cp = utf8::decode(symbols, i, &len);
    if (cp >= t.byte_of_cp.size() || t.byte_of_cp[cp] < 0) return std::nullopt;
    out += char(t.byte_of_cp[cp]);
    i += len;
  }
  return out;
}

}  // namespace dsv4::tok
