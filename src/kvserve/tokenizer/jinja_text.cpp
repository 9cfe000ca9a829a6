// Python string semantics for the Jinja interpreter: repr() of str and float, code points,
// whitespace, strip and case mapping.
#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cmath>

#include "kvserve/tokenizer/jinja_value.h"
#include "kvserve/tokenizer/utf8.h"

namespace kvserve::tokenizer::jinja {
namespace {

bool python_isprintable(uint32_t cp) {
  if (cp < 0x20 || cp == 0x7f) return false;
  if (cp >= 0x80 && cp <= 0xa0) return false;
  if (cp == 0xad || cp == 0x1680 || cp == 0x180e || cp == 0x3000 || cp == 0xfeff) return false;
  if ((cp >= 0x2000 && cp <= 0x200f) || (cp >= 0x2028 && cp <= 0x202f)) return false;
  if ((cp >= 0x205f && cp <= 0x206f) || (cp >= 0xfff9 && cp <= 0xfffb)) return false;
  if ((cp >= 0xe000 && cp <= 0xf8ff) || cp >= 0xf0000) return false;  // private use
  return true;
}

}  // namespace

std::string python_float_repr(double x) {
  if (std::isnan(x)) return "nan";
  if (std::isinf(x)) return x > 0 ? "inf" : "-inf";
  char buf[64];
  const auto res = std::to_chars(buf, buf + sizeof(buf), x, std::chars_format::scientific);
  const std::string_view sci(buf, static_cast<size_t>(res.ptr - buf));
  const size_t e_pos = sci.find('e');
  std::string mantissa(sci.substr(0, e_pos));
  int exponent = 0;
  std::from_chars(sci.data() + e_pos + 1 + (sci[e_pos + 1] == '+' ? 1 : 0), sci.data() + sci.size(),
                  exponent);
  std::string sign;
  if (mantissa[0] == '-') {
    sign = "-";
    mantissa.erase(0, 1);
  }
  std::string digits;
  for (char c : mantissa) {
    if (c != '.') digits += c;
  }
  if (exponent < -4 || exponent >= 16) {
    std::string out = sign + digits.substr(0, 1);
    if (digits.size() > 1) out += "." + digits.substr(1);
    out += exponent < 0 ? "e-" : "e+";
    const int e = std::abs(exponent);
    if (e < 10) out += '0';
    out += std::to_string(e);
    return out;
  }
  if (exponent < 0)
    return sign + "0." + std::string(static_cast<size_t>(-exponent - 1), '0') + digits;
  const auto int_len = static_cast<size_t>(exponent + 1);
  if (digits.size() <= int_len)
    return sign + digits + std::string(int_len - digits.size(), '0') + ".0";
  return sign + digits.substr(0, int_len) + "." + digits.substr(int_len);
}

std::string python_str_repr(std::string_view s) {
  const bool has_single = s.find('\'') != std::string_view::npos;
  const bool has_double = s.find('"') != std::string_view::npos;
  const char quote = has_single && !has_double ? '"' : '\'';
  std::string out(1, quote);
  size_t pos = 0;
  while (pos < s.size()) {
    const size_t len = utf8_sequence_length(s, pos);
    if (len == 0) {  // not UTF-8: show the byte
      out += fmt::format("\\x{:02x}", static_cast<unsigned char>(s[pos]));
      ++pos;
      continue;
    }
    const size_t start = pos;
    const uint32_t cp = decode_utf8(s, pos);
    if (cp == static_cast<uint32_t>(quote) || cp == '\\') {
      out += '\\';
      out += static_cast<char>(cp);
    } else if (cp == '\n') {
      out += "\\n";
    } else if (cp == '\r') {
      out += "\\r";
    } else if (cp == '\t') {
      out += "\\t";
    } else if (python_isprintable(cp)) {
      out.append(s.substr(start, len));
    } else if (cp < 0x100) {
      out += fmt::format("\\x{:02x}", cp);
    } else if (cp < 0x10000) {
      out += fmt::format("\\u{:04x}", cp);
    } else {
      out += fmt::format("\\U{:08x}", cp);
    }
  }
  out += quote;
  return out;
}

std::vector<std::string_view> utf8_chars(std::string_view s) {
  std::vector<std::string_view> chars;
  chars.reserve(s.size());
  size_t pos = 0;
  while (pos < s.size()) {
    size_t len = utf8_sequence_length(s, pos);
    if (len == 0) len = 1;
    chars.push_back(s.substr(pos, len));
    pos += len;
  }
  return chars;
}

size_t utf8_length(std::string_view s) {
  size_t n = 0;
  size_t pos = 0;
  while (pos < s.size()) {
    const size_t len = utf8_sequence_length(s, pos);
    pos += len == 0 ? 1 : len;
    ++n;
  }
  return n;
}

namespace {

// Simple case mappings: the script blocks chat templates meet.
uint32_t to_upper_cp(uint32_t c) {
  if (c >= 'a' && c <= 'z') return c - 32;
  if (c < 0x80) return c;
  if ((c >= 0xE0 && c <= 0xFE && c != 0xF7)) return c - 32;
  if (c == 0xFF) return 0x178;
  if (c == 0xB5) return 0x39C;
  if (c >= 0x100 && c <= 0x17F && c != 0x130 && c != 0x131 && c != 0x138 && c != 0x149 &&
      c != 0x17F) {
    const bool odd_lower = (c >= 0x139 && c <= 0x148) || (c >= 0x179 && c <= 0x17E);
    if (odd_lower ? (c % 2 == 0) : (c % 2 == 1)) return c - 1;
    return c;
  }
  if (c == 0x17F) return 'S';
  if (c >= 0x3B1 && c <= 0x3CB && c != 0x3C2) return c - 32;
  if (c == 0x131) return 'I';
  if (c == 0x3C2) return 0x3A3;
  if (c >= 0x3AC && c <= 0x3CE) {
    switch (c) {
      case 0x3AC:
        return 0x386;
      case 0x3AD:
        return 0x388;
      case 0x3AE:
        return 0x389;
      case 0x3AF:
        return 0x38A;
      case 0x3CC:
        return 0x38C;
      case 0x3CD:
        return 0x38E;
      case 0x3CE:
        return 0x38F;
      default:
        return c;
    }
  }
  if (c >= 0x430 && c <= 0x44F) return c - 32;
  if (c >= 0x450 && c <= 0x45F) return c - 80;
  if (c >= 0x4C1 && c <= 0x4CE) return c % 2 == 0 ? c - 1 : c;
  if (c == 0x4CF) return 0x4C0;
  if ((c >= 0x460 && c <= 0x52F && !(c >= 0x482 && c <= 0x489)) || (c >= 0x3D8 && c <= 0x3EF)) {
    return c % 2 == 1 ? c - 1 : c;
  }
  if (c >= 0xFF41 && c <= 0xFF5A) return c - 32;
  return c;
}

uint32_t to_lower_cp(uint32_t c) {
  if (c >= 'A' && c <= 'Z') return c + 32;
  if (c < 0x80) return c;
  if (c >= 0xC0 && c <= 0xDE && c != 0xD7) return c + 32;
  if (c == 0x178) return 0xFF;
  if (c >= 0x100 && c <= 0x17F && c != 0x130 && c != 0x131 && c != 0x138 && c != 0x149 &&
      c != 0x17F) {
    const bool odd_lower = (c >= 0x139 && c <= 0x148) || (c >= 0x179 && c <= 0x17E);
    if (odd_lower ? (c % 2 == 1) : (c % 2 == 0)) return c + 1;
    return c;
  }
  if (c >= 0x391 && c <= 0x3AB && c != 0x3A2) return c + 32;
  switch (c) {
    case 0x386:
      return 0x3AC;
    case 0x388:
      return 0x3AD;
    case 0x389:
      return 0x3AE;
    case 0x38A:
      return 0x3AF;
    case 0x38C:
      return 0x3CC;
    case 0x38E:
      return 0x3CD;
    case 0x38F:
      return 0x3CE;
    default:
      break;
  }
  if (c >= 0x410 && c <= 0x42F) return c + 32;
  if (c >= 0x400 && c <= 0x40F) return c + 80;
  if (c >= 0x4C1 && c <= 0x4CE) return c % 2 == 1 ? c + 1 : c;
  if (c == 0x4C0) return 0x4CF;
  if ((c >= 0x460 && c <= 0x52F && !(c >= 0x482 && c <= 0x489)) || (c >= 0x3D8 && c <= 0x3EF)) {
    return c % 2 == 0 ? c + 1 : c;
  }
  if (c >= 0xFF21 && c <= 0xFF3A) return c + 32;
  return c;
}

std::string map_case(std::string_view s, bool upper) {
  std::string out;
  out.reserve(s.size());
  size_t pos = 0;
  while (pos < s.size()) {
    if (utf8_sequence_length(s, pos) == 0) {
      out += s[pos++];
      continue;
    }
    const uint32_t c = decode_utf8(s, pos);
    if (upper && c == 0xDF) {
      out += "SS";
      continue;
    }
    append_utf8(out, upper ? to_upper_cp(c) : to_lower_cp(c));
  }
  return out;
}

}  // namespace

std::string unicode_upper(std::string_view s) {
  return map_case(s, true);
}

std::string unicode_lower(std::string_view s) {
  return map_case(s, false);
}

bool python_isspace(uint32_t cp) {
  return (cp >= 0x09 && cp <= 0x0d) || (cp >= 0x1c && cp <= 0x20) || cp == 0x85 || cp == 0xa0 ||
         cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200a) || cp == 0x2028 || cp == 0x2029 ||
         cp == 0x202f || cp == 0x205f || cp == 0x3000;
}

std::string python_strip(std::string_view s, const std::string* chars, bool left, bool right) {
  const std::vector<std::string_view> cs = utf8_chars(s);
  std::vector<std::string_view> strip_set;
  if (chars != nullptr) strip_set = utf8_chars(*chars);
  const auto strippable = [&](std::string_view c) {
    if (chars != nullptr)
      return std::find(strip_set.begin(), strip_set.end(), c) != strip_set.end();
    size_t pos = 0;
    return utf8_sequence_length(c, 0) != 0 && python_isspace(decode_utf8(c, pos));
  };
  size_t begin = 0;
  size_t end = cs.size();
  if (left) {
    while (begin < end && strippable(cs[begin]))
      ++begin;
  }
  if (right) {
    while (end > begin && strippable(cs[end - 1]))
      --end;
  }
  if (begin == end) return {};
  const char* first = cs[begin].data();
  const char* last = cs[end - 1].data() + cs[end - 1].size();
  return std::string(first, static_cast<size_t>(last - first));
}

std::vector<std::string> splitlines(const std::string& s) {
  std::vector<std::string> lines;
  std::string line;
  for (size_t i = 0; i < s.size(); ++i) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    size_t skip = 0;
    if (c == '\n' || c == '\v' || c == '\f' || (c >= 0x1c && c <= 0x1e)) {
      skip = 1;
    } else if (c == '\r') {
      skip = i + 1 < s.size() && s[i + 1] == '\n' ? 2 : 1;
    } else if (s.compare(i, 2, "\xC2\x85") == 0) {
      skip = 2;
    } else if (s.compare(i, 3, "\xE2\x80\xA8") == 0 || s.compare(i, 3, "\xE2\x80\xA9") == 0) {
      skip = 3;
    }
    if (skip == 0) {
      line += s[i];
      continue;
    }
    lines.push_back(std::move(line));
    line.clear();
    i += skip - 1;
  }
  if (!line.empty()) lines.push_back(std::move(line));
  return lines;
}

// Python's int(str): optional sign, digits with single underscores, surrounding whitespace.
bool parse_python_int(std::string s, int64_t base, int64_t& out) {
  s = python_strip(s, nullptr, true, true);
  size_t i = 0;
  bool negative = false;
  if (i < s.size() && (s[i] == '+' || s[i] == '-')) negative = s[i++] == '-';
  if (i >= s.size()) return false;
  int64_t value = 0;
  bool digit_before = false;
  for (; i < s.size(); ++i) {
    const char c = s[i];
    if (c == '_' && digit_before && i + 1 < s.size() && s[i + 1] != '_') continue;
    const int d = (c >= '0' && c <= '9')   ? c - '0'
                  : (c >= 'a' && c <= 'z') ? c - 'a' + 10
                  : (c >= 'A' && c <= 'Z') ? c - 'A' + 10
                                           : 99;
    if (d >= base) return false;
    if (__builtin_mul_overflow(value, base, &value) || __builtin_add_overflow(value, d, &value))
      return false;
    digit_before = true;
  }
  out = negative ? -value : value;
  return true;
}

bool parse_python_float(const std::string& text, double& out) {
  std::string s;
  for (char c : python_strip(text, nullptr, true, true)) {
    if (c != '_') s += c;
  }
  if (s.empty()) return false;
  char* end = nullptr;
  out = std::strtod(s.c_str(), &end);
  return end == s.c_str() + s.size();
}

}  // namespace kvserve::tokenizer::jinja
