// The KV staging ops (kv_staging_params.h): gather token slots of a paged pool into a contiguous
// staging region, or scatter them back, with a dtype conversion and a head slice. One kernel per
// call on CUDA (one block per (token, layer, K/V)), queued on `stream`; the CPU version is the
// reference and what the CPU platform runs.
#pragma once

#include "kvserve/platform/ops/kv_staging_params.h"
#include "kvserve/platform/platform.h"

namespace kvserve::ops {

// Whether the op converts `from` into `to` (equal types, or both f32/f16/bf16).
bool kv_staging_converts(DType from, DType to);

void kv_staging(platform::Platform& platform, const KvStagingParams& params,
                platform::StreamHandle stream = {});

namespace cpu {
void kv_staging(const KvStagingParams& params);
}  // namespace cpu

}  // namespace kvserve::ops
