#include "kvserve/platform/ops/copy_runs.h"

#include <cstring>

#include "kvserve/platform/cuda/ops.h"
#include "kvserve/platform/ops/dispatch.h"

namespace kvserve::ops {

namespace cpu {
void copy_runs(const CopyRunsParams& p) {
  for (int32_t r = 0; r < p.num_runs; ++r) {
    std::memmove(p.dst + p.runs[3 * r + 1], p.src + p.runs[3 * r], p.runs[3 * r + 2]);
  }
}
}  // namespace cpu

void copy_runs(platform::Platform& platform, const CopyRunsParams& params,
               platform::StreamHandle stream) {
  if (params.num_runs == 0) return;
  dispatch(platform, params, stream, &cpu::copy_runs, &platform::cuda::copy_runs);
}

}  // namespace kvserve::ops
