// The CUDA platform's kernels, callable from plain C++ (no CUDA types in this header).
// In a build without CUDA these are defined in cuda_unavailable.cpp and CHECK-fail: no CUDA
// platform can exist there, so no caller can reach them.
#pragma once

#include "kvserve/platform/handles.h"
#include "kvserve/platform/ops/kv_store_params.h"
#include "kvserve/platform/ops/paged_decode_params.h"

namespace kvserve::platform::cuda {

void store_kv(const ops::KvStoreParams& params, StreamHandle stream);
void paged_decode(const ops::PagedDecodeParams& params, StreamHandle stream);
// Streaming multiprocessors of the current device (for split decisions).
int multiprocessor_count();

}  // namespace kvserve::platform::cuda
