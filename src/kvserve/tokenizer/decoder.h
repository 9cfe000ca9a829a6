// Decoders of tokenizer.json ("decoder"), with Hugging Face's (Rust) semantics: ByteLevel,
// Metaspace, Replace, ByteFallback, Fuse, Strip, BPEDecoder and Sequence. Others (WordPiece, CTC)
// are kUnimplemented. Each works on the list of token strings, as decode_chain in Hugging Face.
#pragma once

#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "kvserve/core/status.h"

namespace kvserve::tokenizer {

class Decoder {
 public:
  virtual ~Decoder() = default;
  virtual void decode_chain(std::vector<std::string>& tokens) const = 0;
};

// Null JSON gives a null decoder (the tokens are then joined with spaces).
Result<std::unique_ptr<Decoder>> make_decoder(const nlohmann::json& json, std::string_view file);

}  // namespace kvserve::tokenizer
