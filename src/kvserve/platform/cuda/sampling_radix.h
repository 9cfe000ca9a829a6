// The radix-select sampling kernel (sampling.cu), callable from plain C++: ops::sample_rows with
// SampleSelect::kRadix, the A/B reference for the binned-select default (cuda::sample_rows in
// sampling_bins.cu, declared in ops.h). A build without CUDA defines it in cuda_unavailable.cpp.
#pragma once

#include "kvserve/platform/handles.h"
#include "kvserve/platform/ops/sampling_params.h"

namespace kvserve::platform::cuda {

void sample_rows_radix(const ops::SampleRowsParams& params, StreamHandle stream);

}  // namespace kvserve::platform::cuda
