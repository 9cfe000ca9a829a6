#include "kvserve/platform/ops/whisper_ops.h"

#include "kvserve/core/check.h"
#include "kvserve/platform/cuda/ops.h"
#include "kvserve/platform/ops/dispatch.h"

namespace kvserve::ops {

void layer_norm(platform::Platform& p, const LayerNormParams& params,
                platform::StreamHandle stream) {
  dispatch(p, params, stream, cpu::layer_norm, platform::cuda::layer_norm);
}

void gelu(platform::Platform& p, const GeluParams& params, platform::StreamHandle stream) {
  dispatch(p, params, stream, cpu::gelu, platform::cuda::gelu);
}

void conv1d(platform::Platform& p, const Conv1dParams& params, platform::StreamHandle stream) {
  KV_CHECK(p.device().is_cpu() || params.workspace != nullptr,
           "conv1d on {} needs an im2col workspace", p.device().to_string());
  dispatch(p, params, stream, cpu::conv1d, platform::cuda::conv1d);
}

void add_position_embedding(platform::Platform& p, const AddPositionEmbeddingParams& params,
                            platform::StreamHandle stream) {
  dispatch(p, params, stream, cpu::add_position_embedding, platform::cuda::add_position_embedding);
}

}  // namespace kvserve::ops
