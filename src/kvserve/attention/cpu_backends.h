// The two CPU attention backends.
//   native: per request, gather the row's K/V into contiguous buffers, then dense attention
//           (seed 001's torch-native path; the reference every other backend is tested against).
//   cpu:    batched, reads the paged pool in place through CSR page indices built once per
//           forward, for any page size; online softmax, parallel over (token, head).
#pragma once

#include <memory>

#include "kvserve/attention/backend.h"

namespace kvserve::attention {

std::unique_ptr<AttentionBackend> make_native_backend(platform::Platform& platform);
std::unique_ptr<AttentionBackend> make_cpu_paged_backend(platform::Platform& platform);

}  // namespace kvserve::attention
