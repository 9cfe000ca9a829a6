#include "kvserve/engine/logit_rules.h"

#include <limits>

namespace kvserve::engine {
namespace {

void suppress(std::span<float> logits, const std::vector<int32_t>& ids) {
  for (const int32_t id : ids) {
    if (id >= 0 && static_cast<size_t>(id) < logits.size()) {
      logits[static_cast<size_t>(id)] = -std::numeric_limits<float>::infinity();
    }
  }
}

}  // namespace

void LogitRules::apply(std::span<float> logits, int64_t step) const {
  suppress(logits, suppress_tokens);
  if (step == 0) suppress(logits, begin_suppress_tokens);
}

LogitRules whisper_logit_rules(const checkpoint::WhisperGenerationConfig& g) {
  return {.suppress_tokens = g.suppress_tokens, .begin_suppress_tokens = g.begin_suppress_tokens};
}

}  // namespace kvserve::engine
