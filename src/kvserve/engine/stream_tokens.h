// Waiting for one request's whole output: what a caller that does not stream (kvserve transcribe,
// the transcription server) reads of a RequestStream.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "kvserve/core/status.h"
#include "kvserve/engine/request_stream.h"

namespace kvserve::engine {

// The request's tokens once it finished (a final eos included), waiting as long as it runs. An
// abort (e.g. at shutdown) or a failed batch (FinishKind::kError) is kUnavailable: "the <what> was
// aborted: <why>" / "the <what> failed: <why>" (a retry may succeed).
Result<std::vector<int32_t>> wait_for_tokens(RequestStream& stream, std::string_view what);

}  // namespace kvserve::engine
