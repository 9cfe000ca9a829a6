#include "kvserve/engine/stream_tokens.h"

#include <chrono>
#include <deque>

namespace kvserve::engine {

Result<std::vector<int32_t>> wait_for_tokens(RequestStream& stream, std::string_view what) {
  std::vector<int32_t> tokens;
  std::deque<StreamEvent> events;
  while (true) {
    if (!stream.pop_all(events, std::chrono::milliseconds(1000))) continue;
    for (StreamEvent& e : events) {
      tokens.insert(tokens.end(), e.token_ids.begin(), e.token_ids.end());
      if (!e.finished) continue;
      if (e.finish.kind == FinishKind::kAbort) {
        return unavailable("the {} was aborted: {}", what, e.finish.message);
      }
      if (e.finish.kind == FinishKind::kError) {  // its batch failed; the engine goes on
        return unavailable("the {} failed: {}", what, e.finish.message);
      }
      return tokens;
    }
  }
}

}  // namespace kvserve::engine
