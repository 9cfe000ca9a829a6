// The tensor-core decode kernel's CUDA entry points (platform/cuda/paged_prefill.cu), callable from
// plain C++ (no CUDA types here). Declared apart from cuda/ops.h; callers reach them through
// ops::paged_decode_tc (platform/ops/paged_prefill.h), which compiles the call only in a build
// with CUDA (KVSERVE_WITH_CUDA).
#pragma once

#include <cstdint>

#include "kvserve/platform/handles.h"
#include "kvserve/platform/ops/paged_decode_params.h"
#include "kvserve/platform/ops/paged_prefill_params.h"

namespace kvserve::platform::cuda {

// Decode attention on tensor cores over PagedDecodeParams (num_splits > 1: partials into the
// workspace, merged by the last split block of each (query, KV head) when the params carry split
// counters, else by a merge kernel launched with programmatic dependent launch unless
// $KVSERVE_PDL=0). `stages`: 2, 3 or 4 K/V tiles in flight (resolved by the caller).
void paged_decode_tc(const ops::PagedDecodeParams& params, int32_t stages, StreamHandle stream);

// Blocks of the (head_dim, stages) kernel resident per SM on the current device, as the CUDA
// occupancy calculator reports it (the plan assumes ops::decode_tc_ctas_per_sm).
int32_t paged_decode_tc_occupancy(int32_t head_dim, int32_t stages);

}  // namespace kvserve::platform::cuda
