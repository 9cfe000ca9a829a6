// The element-wise and row-wise ops of decoder layers: embedding lookup, RMSNorm (with fused
// residual add), rotary position embedding (rotate-half, per-frequency table), SiLU-and-mul, and
// the norm with the projection after it (normed_linear).
// One params struct each; `dispatch` picks the platform's kernel at one boundary.
#pragma once

#include <cstdint>

#include "kvserve/platform/ops/layer_ops_params.h"
#include "kvserve/platform/platform.h"

namespace kvserve::ops {

void embedding(platform::Platform& p, const EmbeddingParams& params,
               platform::StreamHandle stream = {});
void rms_norm(platform::Platform& p, const RmsNormParams& params,
              platform::StreamHandle stream = {});
void rope(platform::Platform& p, const RopeParams& params, platform::StreamHandle stream = {});
void act_and_mul(platform::Platform& p, const ActAndMulParams& params,
                 platform::StreamHandle stream = {});
void softcap(platform::Platform& p, const SoftcapParams& params,
             platform::StreamHandle stream = {});
void split_qkv_rope(platform::Platform& p, const SplitQkvRopeParams& params,
                    platform::StreamHandle stream = {});
void normed_linear(platform::Platform& p, const NormedLinearParams& params,
                   platform::StreamHandle stream = {});
// out[r] = argmax(logits[r, :vocab]), the lowest index on ties (greedy sampling on the device).
void argmax_rows(platform::Platform& p, const float* logits, int64_t rows, int64_t vocab,
                 int32_t* out, platform::StreamHandle stream = {});

namespace cpu {
void embedding(const EmbeddingParams& params);
void rms_norm(const RmsNormParams& params);
void rope(const RopeParams& params);
void act_and_mul(const ActAndMulParams& params);
void softcap(const SoftcapParams& params);
void split_qkv_rope(const SplitQkvRopeParams& params);
}  // namespace cpu

}  // namespace kvserve::ops
