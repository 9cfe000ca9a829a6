// copy_runs (copy_runs_params.h): a batch of byte copies in one launch (CUDA: blocks stride over
// the runs, 16-byte loads where a run's ends allow); the CPU version is memmove per run.
#pragma once

#include "kvserve/platform/ops/copy_runs_params.h"
#include "kvserve/platform/platform.h"

namespace kvserve::ops {

void copy_runs(platform::Platform& platform, const CopyRunsParams& params,
               platform::StreamHandle stream = {});

namespace cpu {
void copy_runs(const CopyRunsParams& params);
}  // namespace cpu

}  // namespace kvserve::ops
