// UTF-8 helpers: decoding code points, encoding them, and Rust's String::from_utf8_lossy (one
// U+FFFD for each maximal invalid subpart), which is what Hugging Face's decoders produce.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace kvserve::tokenizer {

inline constexpr std::string_view kReplacementChar = "\xEF\xBF\xBD";  // U+FFFD

// Length of the valid UTF-8 sequence starting at s[pos], or 0 if the bytes there are not one.
size_t utf8_sequence_length(std::string_view s, size_t pos);

// Decodes the code point at s[pos] (which must start a valid sequence) and advances pos.
uint32_t decode_utf8(std::string_view s, size_t& pos);

void append_utf8(std::string& out, uint32_t code_point);

bool is_valid_utf8(std::string_view s);

// Replaces every maximal invalid subpart with U+FFFD (Rust's from_utf8_lossy, the WHATWG decoder).
std::string utf8_lossy(std::string_view bytes);

// True when the text ends with U+FFFD (an incomplete character that more bytes may complete).
inline bool ends_with_replacement(std::string_view s) {
  return s.ends_with(kReplacementChar);
}

}  // namespace kvserve::tokenizer

namespace kvserve::tokenizer {

// Unicode White_Space (Rust's char::is_whitespace).
bool is_unicode_whitespace(uint32_t code_point);

}  // namespace kvserve::tokenizer
