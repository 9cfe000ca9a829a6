// Variable-length attention over contiguous K/V and the K/V gather from the paged pool
// (varlen_attention_params.h): the kernels of the cuda-ragged attention backend, and of Whisper's
// dense encoder attention on CUDA. CUDA only: the CPU backends read the pool in place.
#pragma once

#include "kvserve/platform/ops/varlen_attention_params.h"
#include "kvserve/platform/platform.h"

namespace kvserve::ops {

void gather_kv(platform::Platform& p, const GatherKvParams& params,
               platform::StreamHandle stream = {});
void varlen_attention(platform::Platform& p, const VarlenAttentionParams& params,
                      platform::StreamHandle stream = {});

}  // namespace kvserve::ops
