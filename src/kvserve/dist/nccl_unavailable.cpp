// A build without CUDA: no NCCL.
#include "kvserve/dist/nccl_communicator.h"

namespace kvserve::dist {

namespace {
Status no_nccl() {
  return Status(StatusCode::kUnimplemented,
                "this kvserve was built without CUDA: no NCCL communicator");
}
}  // namespace

Status nccl_library_status() {
  return no_nccl();
}

Result<NcclUniqueId> nccl_unique_id() {
  return no_nccl();
}

Result<std::unique_ptr<Communicator>> create_nccl_communicator(const NcclUniqueId&, int32_t,
                                                               int32_t, int32_t) {
  return no_nccl();
}

}  // namespace kvserve::dist
