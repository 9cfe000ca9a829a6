// The CUDA attention backends.
//   cuda-paged: every query token reads its request's KV in place through page ids with the
//               paged decode kernel (decode, extend with a cached prefix, cross-attention).
#pragma once

#include <memory>

#include "kvserve/attention/backend.h"

namespace kvserve::attention {

std::unique_ptr<AttentionBackend> make_cuda_paged_backend(platform::Platform& platform);

}  // namespace kvserve::attention
