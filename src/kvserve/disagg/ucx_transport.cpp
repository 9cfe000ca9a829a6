// The ucx backend (UCP): see kv_transport.h. Filled in by the next commit.
#include "kvserve/disagg/backends.h"

namespace kvserve::disagg {

Result<std::unique_ptr<KvTransport>> create_ucx_transport(const TransportOptions&) {
  return unavailable("the ucx KV transfer backend is not built yet");
}

Result<std::unique_ptr<KvTransport>> create_cuda_ipc_transport(const TransportOptions&) {
  return unavailable("the cuda-ipc KV transfer backend is not built yet");
}

}  // namespace kvserve::disagg
