// Normalizers of tokenizer.json ("normalizer"): Sequence, Prepend, Replace (string or regex),
// NFC, Strip. Others (Lowercase, NFD, NFKC, NFKD, BertNormalizer, Precompiled, ...) are
// kUnimplemented.
#pragma once

#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <string_view>

#include "kvserve/core/status.h"

namespace kvserve::tokenizer {

class Normalizer {
 public:
  virtual ~Normalizer() = default;
  // `text` is valid UTF-8 and stays so.
  virtual void normalize(std::string& text) const = 0;
};

// `json` is the "normalizer" object; `file` names tokenizer.json in errors. Null JSON gives a
// null normalizer.
Result<std::unique_ptr<Normalizer>> make_normalizer(const nlohmann::json& json,
                                                    std::string_view file);

}  // namespace kvserve::tokenizer
