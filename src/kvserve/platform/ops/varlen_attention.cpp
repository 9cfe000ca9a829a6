#include "kvserve/platform/ops/varlen_attention.h"

#include "kvserve/core/check.h"
#include "kvserve/platform/cuda/ops.h"
#include "kvserve/platform/ops/dispatch.h"

namespace kvserve::ops {
namespace {

void require_cuda(const platform::Platform& p, const char* op) {
  KV_CHECK(p.device().kind == DeviceKind::kCuda, "{} runs on CUDA only (asked for {})", op,
           p.device().to_string());
}

}  // namespace

void gather_kv(platform::Platform& p, const GatherKvParams& params, platform::StreamHandle stream) {
  if (params.num_tokens == 0) return;
  require_cuda(p, "gather_kv");
  platform::cuda::gather_kv(params, p.resolve(stream));
}

void varlen_attention(platform::Platform& p, const VarlenAttentionParams& params,
                      platform::StreamHandle stream) {
  dispatch(p, params, stream, cpu::varlen_attention, platform::cuda::varlen_attention);
}

}  // namespace kvserve::ops
