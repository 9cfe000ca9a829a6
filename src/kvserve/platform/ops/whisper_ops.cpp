#include "kvserve/platform/ops/whisper_ops.h"

#include "kvserve/core/check.h"

namespace kvserve::ops {
namespace {

// The one boundary where a Whisper op meets a platform: the CPU kernels run on the calling
// thread; no other device has them yet.
template <typename Params>
void dispatch(platform::Platform& p, const Params& params, platform::StreamHandle /*stream*/,
              void (*on_cpu)(const Params&), const char* op) {
  switch (p.device().kind) {
    case DeviceKind::kCpu:
      return on_cpu(params);
    case DeviceKind::kCuda:
      break;
  }
  KV_CHECK(false, "{}: the Whisper ops run on the CPU only so far (asked for {})", op,
           p.device().to_string());
}

}  // namespace

void layer_norm(platform::Platform& p, const LayerNormParams& params,
                platform::StreamHandle stream) {
  dispatch(p, params, stream, cpu::layer_norm, "layer_norm");
}

void gelu(platform::Platform& p, const GeluParams& params, platform::StreamHandle stream) {
  dispatch(p, params, stream, cpu::gelu, "gelu");
}

void conv1d(platform::Platform& p, const Conv1dParams& params, platform::StreamHandle stream) {
  dispatch(p, params, stream, cpu::conv1d, "conv1d");
}

void add_position_embedding(platform::Platform& p, const AddPositionEmbeddingParams& params,
                            platform::StreamHandle stream) {
  dispatch(p, params, stream, cpu::add_position_embedding, "add_position_embedding");
}

void dense_attention(platform::Platform& p, const DenseAttentionParams& params,
                     platform::StreamHandle stream) {
  dispatch(p, params, stream, cpu::dense_attention, "dense_attention");
}

}  // namespace kvserve::ops
