// Unicode Normalization Form C (canonical decomposition, canonical ordering, canonical
// composition), for tokenizers whose normalizer is "NFC" (Qwen2). Tables: unicode_nfc_data.cpp.
#pragma once

#include <string>
#include <string_view>

namespace kvserve::tokenizer {

// `text` must be valid UTF-8.
std::string nfc(std::string_view text);

}  // namespace kvserve::tokenizer
