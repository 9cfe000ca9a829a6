// Variable-length attention over contiguous K/V and the K/V gather from the paged pool
// (varlen_attention_params.h): the kernels of the cuda-ragged attention backend, and Whisper's
// encoder self-attention (one sequence, not causal). varlen_attention runs on the CPU (f32,
// cpu/varlen_attention.cpp) and on CUDA; gather_kv on CUDA only (the CPU backends read the pool
// in place).
#pragma once

#include "kvserve/platform/ops/varlen_attention_params.h"
#include "kvserve/platform/platform.h"

namespace kvserve::ops {

void gather_kv(platform::Platform& p, const GatherKvParams& params,
               platform::StreamHandle stream = {});
void varlen_attention(platform::Platform& p, const VarlenAttentionParams& params,
                      platform::StreamHandle stream = {});

namespace cpu {
void varlen_attention(const VarlenAttentionParams& params);  // per head and query block: sgemm
}  // namespace cpu

}  // namespace kvserve::ops
