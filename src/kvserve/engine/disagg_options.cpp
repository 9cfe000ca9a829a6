#include "kvserve/engine/disagg_options.h"

namespace kvserve::engine {

std::string_view disagg_mode_name(DisaggMode mode) {
  switch (mode) {
    case DisaggMode::kNone:
      return "null";
    case DisaggMode::kPrefill:
      return "prefill";
    case DisaggMode::kDecode:
      return "decode";
  }
  return "?";
}

Result<DisaggMode> parse_disagg_mode(std::string_view name) {
  for (DisaggMode m : {DisaggMode::kNone, DisaggMode::kPrefill, DisaggMode::kDecode}) {
    if (name == disagg_mode_name(m)) return m;
  }
  return invalid_argument("--disaggregation-mode: '{}' is not one of null, prefill, decode", name);
}

}  // namespace kvserve::engine
