// GPT-2's bytes-to-unicode table: every byte maps to a printable character (printable ASCII and
// Latin-1 map to themselves, the rest to U+0100..U+0143), so that BPE runs on visible strings.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace kvserve::tokenizer {

// The UTF-8 of the character standing for byte b.
std::string_view byte_to_unicode(uint8_t b);

// Appends the byte-level form of `bytes` (each byte replaced by its character) to `out`.
void append_byte_level(std::string& out, std::string_view bytes);

// The byte a character stands for, or -1 when the character is not in the table.
int byte_of_unicode(uint32_t code_point);

// The bytes a byte-level token stands for. A token holding any character outside the table is
// taken as its own UTF-8 bytes (Hugging Face's ByteLevel decoder does the same).
void append_bytes_of_token(std::string& out, std::string_view token);

}  // namespace kvserve::tokenizer
