// The cuda-ipc backend (see kv_transport.h). Filled in by a later commit.
#include "kvserve/disagg/backends.h"

namespace kvserve::disagg {

Result<std::unique_ptr<KvTransport>> create_cuda_ipc_transport(const TransportOptions&) {
  return unavailable("the cuda-ipc KV transfer backend is not built yet");
}

}  // namespace kvserve::disagg
