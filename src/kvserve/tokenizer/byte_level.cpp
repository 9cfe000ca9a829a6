#include "kvserve/tokenizer/byte_level.h"

#include <array>

#include "kvserve/tokenizer/utf8.h"

namespace kvserve::tokenizer {
namespace {

struct Tables {
  std::array<std::string, 256> byte_to_utf8;
  std::array<int16_t, 0x144> code_point_to_byte;  // all table characters are below U+0144
  Tables() {
    code_point_to_byte.fill(-1);
    uint32_t next = 256;
    for (uint32_t b = 0; b < 256; ++b) {
      const bool visible = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
      const uint32_t cp = visible ? b : next++;
      append_utf8(byte_to_utf8[b], cp);
      code_point_to_byte[cp] = static_cast<int16_t>(b);
    }
  }
};

const Tables& tables() {
  static const Tables kTables;
  return kTables;
}

}  // namespace

std::string_view byte_to_unicode(uint8_t b) {
  return tables().byte_to_utf8[b];
}

void append_byte_level(std::string& out, std::string_view bytes) {
  const Tables& t = tables();
  for (const char c : bytes)
    out.append(t.byte_to_utf8[static_cast<uint8_t>(c)]);
}

int byte_of_unicode(uint32_t code_point) {
  return code_point < 0x144 ? tables().code_point_to_byte[code_point] : -1;
}

void append_bytes_of_token(std::string& out, std::string_view token) {
  const size_t mark = out.size();
  for (size_t pos = 0; pos < token.size();) {
    const size_t len = utf8_sequence_length(token, pos);
    const int b = len == 0 ? -1 : byte_of_unicode(decode_utf8(token, pos));
    if (b < 0) {
      out.resize(mark);
      out.append(token);
      return;
    }
    out.push_back(static_cast<char>(b));
  }
}

}  // namespace kvserve::tokenizer
