// DisaggTarget: where a disaggregated request's other half is (docs/disaggregation.md).
#pragma once

#include <cstdint>
#include <string>

namespace kvserve::engine {

// The prefill server's control-plane address and the room id both halves carry (the router
// draws it, 63 bits). A prefill server uses only the room.
struct DisaggTarget {
  std::string bootstrap_host;
  int32_t bootstrap_port = 0;
  uint64_t room = 0;
};

}  // namespace kvserve::engine
