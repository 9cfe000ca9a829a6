// The request-to-token ops (req_to_token_params.h): writing a forward's rows into the device
// mirror of req_to_token and building page lists / slot lists from it. The CPU versions are the
// reference and what the CPU platform runs (tests drive the mirror there); the CUDA kernels run
// one block per request, queued on `stream` (null: the platform's current stream, which a decode
// graph capture may be recording).
#pragma once

#include "kvserve/platform/ops/req_to_token_params.h"
#include "kvserve/platform/platform.h"

namespace kvserve::ops {

void write_req_to_token(platform::Platform& platform, const WriteReqToTokenParams& params,
                        platform::StreamHandle stream = {});
void build_kv_indices(platform::Platform& platform, const BuildKvIndicesParams& params,
                      platform::StreamHandle stream = {});

namespace cpu {
void write_req_to_token(const WriteReqToTokenParams& params);
void build_kv_indices(const BuildKvIndicesParams& params);
}  // namespace cpu

}  // namespace kvserve::ops
