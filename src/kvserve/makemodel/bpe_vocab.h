// GPT-2's byte-level BPE vocabulary, rebuilt from its merge list: the 256 byte symbols in
// bytes_to_unicode order, then each merge's concatenation in rank order.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "kvserve/core/status.h"

namespace kvserve::makemodel {

// GPT-2's bytes_to_unicode: the UTF-8 symbol standing for each byte value (index = byte).
const std::vector<std::string>& byte_level_symbols();

// Byte values in GPT-2's vocabulary order (the printable ones first): token id i of the byte
// block is the symbol of byte_order()[i].
const std::vector<uint8_t>& byte_level_order();

struct BpeVocab {
  std::vector<std::string> tokens;  // id -> token (byte symbols, then one per merge)
  std::vector<std::string> merges;  // "left right", rank order
};

// Builds the vocabulary from "left right" lines (a "#version" line and blank lines are skipped).
// kInvalidArgument when a line is malformed, names a part not yet in the vocabulary, or repeats
// a token.
Result<BpeVocab> build_bpe_vocab(std::string_view merges_text);

// The vocabulary of the embedded GPT-2 merges (4352 tokens); built once.
const BpeVocab& gpt2_4096_vocab();

}  // namespace kvserve::makemodel
