// The ops of Whisper's layers that decoder-only models do not have: LayerNorm with bias (and a
// fused residual add), exact GELU, Conv1d (the encoder's two convolutions) and adding a position
// embedding table. (The encoder's self-attention is ops::varlen_attention over one sequence.)
// One params struct each (whisper_ops_params.h); `dispatch` picks the platform's kernel at one
// boundary: the CPU kernels compute f32 (cpu/whisper_ops.cpp), the CUDA ones f32, f16 or bf16 with
// f32 arithmetic (cuda/whisper_ops.cu).
#pragma once

#include "kvserve/platform/ops/whisper_ops_params.h"
#include "kvserve/platform/platform.h"

namespace kvserve::ops {

void layer_norm(platform::Platform& p, const LayerNormParams& params,
                platform::StreamHandle stream = {});
void gelu(platform::Platform& p, const GeluParams& params, platform::StreamHandle stream = {});
void conv1d(platform::Platform& p, const Conv1dParams& params, platform::StreamHandle stream = {});
void add_position_embedding(platform::Platform& p, const AddPositionEmbeddingParams& params,
                            platform::StreamHandle stream = {});

namespace cpu {
void layer_norm(const LayerNormParams& params);
void gelu(const GeluParams& params);
void conv1d(const Conv1dParams& params);  // im2col + OpenBLAS sgemm
void add_position_embedding(const AddPositionEmbeddingParams& params);
}  // namespace cpu

}  // namespace kvserve::ops
