#include "kvserve/tokenizer/utf8.h"

#include "kvserve/core/check.h"

namespace kvserve::tokenizer {
namespace {

// The number of bytes of the longest prefix of s[pos..] that could still begin a valid sequence
// (at least 1): the "maximal subpart" that from_utf8_lossy replaces by a single U+FFFD.
size_t invalid_subpart_length(std::string_view s, size_t pos) {
  const auto b0 = static_cast<uint8_t>(s[pos]);
  uint8_t lo = 0x80, hi = 0xBF;
  size_t need = 0;
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    need = 1;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    need = 2;
    if (b0 == 0xE0) lo = 0xA0;
    if (b0 == 0xED) hi = 0x9F;
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    need = 3;
    if (b0 == 0xF0) lo = 0x90;
    if (b0 == 0xF4) hi = 0x8F;
  } else {
    return 1;
  }
  size_t len = 1;
  for (size_t k = 0; k < need && pos + len < s.size(); ++k) {
    const auto b = static_cast<uint8_t>(s[pos + len]);
    if (b < lo || b > hi) break;
    ++len;
    lo = 0x80;
    hi = 0xBF;
  }
  return len;
}

}  // namespace

size_t utf8_sequence_length(std::string_view s, size_t pos) {
  const auto b0 = static_cast<uint8_t>(s[pos]);
  if (b0 < 0x80) return 1;
  size_t need = 0;
  uint8_t lo = 0x80, hi = 0xBF;
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    need = 1;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    need = 2;
    if (b0 == 0xE0) lo = 0xA0;
    if (b0 == 0xED) hi = 0x9F;
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    need = 3;
    if (b0 == 0xF0) lo = 0x90;
    if (b0 == 0xF4) hi = 0x8F;
  } else {
    return 0;
  }
  if (pos + need >= s.size()) return 0;
  for (size_t k = 1; k <= need; ++k) {
    const auto b = static_cast<uint8_t>(s[pos + k]);
    if (b < lo || b > hi) return 0;
    lo = 0x80;
    hi = 0xBF;
  }
  return need + 1;
}

uint32_t decode_utf8(std::string_view s, size_t& pos) {
  const auto b0 = static_cast<uint8_t>(s[pos]);
  if (b0 < 0x80) {
    ++pos;
    return b0;
  }
  const size_t len = utf8_sequence_length(s, pos);
  KV_CHECK(len != 0, "decode_utf8 on invalid UTF-8 at byte {}", pos);
  uint32_t cp = b0 & (len == 2 ? 0x1F : len == 3 ? 0x0F : 0x07);
  for (size_t k = 1; k < len; ++k)
    cp = (cp << 6) | (static_cast<uint8_t>(s[pos + k]) & 0x3F);
  pos += len;
  return cp;
}

void append_utf8(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

bool is_valid_utf8(std::string_view s) {
  size_t pos = 0;
  while (pos < s.size()) {
    if (static_cast<uint8_t>(s[pos]) < 0x80) {
      ++pos;
      continue;
    }
    const size_t len = utf8_sequence_length(s, pos);
    if (len == 0) return false;
    pos += len;
  }
  return true;
}

std::string utf8_lossy(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size());
  size_t pos = 0;
  while (pos < bytes.size()) {
    if (static_cast<uint8_t>(bytes[pos]) < 0x80) {
      out.push_back(bytes[pos++]);
      continue;
    }
    const size_t len = utf8_sequence_length(bytes, pos);
    if (len != 0) {
      out.append(bytes.substr(pos, len));
      pos += len;
    } else {
      out.append(kReplacementChar);
      pos += invalid_subpart_length(bytes, pos);
    }
  }
  return out;
}

}  // namespace kvserve::tokenizer

namespace kvserve::tokenizer {

bool is_unicode_whitespace(uint32_t cp) {
  return (cp >= 0x09 && cp <= 0x0D) || cp == 0x20 || cp == 0x85 || cp == 0xA0 || cp == 0x1680 ||
         (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F ||
         cp == 0x205F || cp == 0x3000;
}

}  // namespace kvserve::tokenizer
