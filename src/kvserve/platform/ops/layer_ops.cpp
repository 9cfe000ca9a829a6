#include "kvserve/platform/ops/layer_ops.h"

#include "kvserve/platform/ops/gemm.h"

namespace kvserve::ops {
namespace {

// The one boundary where an op meets a platform. CUDA kernels for these arrive with the CUDA
// model runner; until then a CUDA platform never reaches here (the runner refuses to start).
void require_cpu(const platform::Platform& p, const char* op) {
  KV_CHECK(p.device().is_cpu(), "{} has no kernel for {} yet", op, p.device().to_string());
}

}  // namespace

void gemm(platform::Platform& p, const GemmParams& params, platform::StreamHandle /*stream*/) {
  require_cpu(p, "gemm");
  cpu::gemm(params);
}

void embedding(platform::Platform& p, const EmbeddingParams& params,
               platform::StreamHandle /*stream*/) {
  require_cpu(p, "embedding");
  cpu::embedding(params);
}

void rms_norm(platform::Platform& p, const RmsNormParams& params,
              platform::StreamHandle /*stream*/) {
  require_cpu(p, "rms_norm");
  cpu::rms_norm(params);
}

void rope(platform::Platform& p, const RopeParams& params, platform::StreamHandle /*stream*/) {
  require_cpu(p, "rope");
  cpu::rope(params);
}

void silu_and_mul(platform::Platform& p, const SiluAndMulParams& params,
                  platform::StreamHandle /*stream*/) {
  require_cpu(p, "silu_and_mul");
  cpu::silu_and_mul(params);
}

}  // namespace kvserve::ops
