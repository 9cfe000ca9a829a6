// Post-processors of tokenizer.json ("post_processor") for single sequences: TemplateProcessing
// (special tokens around $A, e.g. Llama's BOS), ByteLevel (offsets only: nothing to do for ids),
// Sequence. Others (BertProcessing, RobertaProcessing) are kUnimplemented.
#pragma once

#include <cstdint>
#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <string_view>
#include <vector>

#include "kvserve/core/status.h"

namespace kvserve::tokenizer {

// What a post-processor adds around a single sequence's ids when special tokens are requested.
struct SpecialTokenTemplate {
  std::vector<int32_t> prefix;
  std::vector<int32_t> suffix;

  void apply(std::vector<int32_t>& ids) const;
};

// Composes the template of a post_processor object (null: nothing added).
Result<SpecialTokenTemplate> make_post_processor_template(const nlohmann::json& json,
                                                          std::string_view file);

}  // namespace kvserve::tokenizer
