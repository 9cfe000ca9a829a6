// The one boundary where an op meets a platform (layer_ops.cpp, whisper_ops.cpp,
// varlen_attention.cpp): the CPU kernel runs on the calling thread, the CUDA one is queued on
// `stream` (a null one: the platform's current stream, which a capture may be recording).
// Launch switches: params with a `pdl` field get the platform's KernelSwitches::pdl here (a copy
// only when it differs from the params' default, so the default path copies nothing).
#pragma once

#include "kvserve/platform/platform.h"

namespace kvserve::ops {

template <typename Params>
void dispatch(platform::Platform& p, const Params& params, platform::StreamHandle stream,
              void (*on_cpu)(const Params&),
              void (*on_cuda)(const Params&, platform::StreamHandle)) {
  switch (p.device().kind) {
    case DeviceKind::kCpu:
      return on_cpu(params);
    case DeviceKind::kCuda:
      if constexpr (requires { params.pdl; }) {
        if (params.pdl != p.kernel_switches().pdl) {
          Params q = params;
          q.pdl = p.kernel_switches().pdl;
          return on_cuda(q, p.resolve(stream));
        }
      }
      return on_cuda(params, p.resolve(stream));
  }
}

}  // namespace kvserve::ops
