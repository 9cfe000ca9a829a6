// NCCL through dlopen: nccl.h gives the types and enums, the functions come from libnccl.so.2 at
// run time. The one file outside platform/ that sees a CUDA header (nccl.h's API is in CUDA types:
// cudaStream_t); it includes only fmt-free kvserve headers besides its own.
#include "kvserve/dist/nccl_communicator.h"

#include <cuda_runtime.h>
#include <dlfcn.h>
#include <nccl.h>

#include <cstring>
#include <mutex>
#include <string>

#include <fmt/format.h>

namespace kvserve::dist {

namespace {

struct NcclLibrary {
  void* handle = nullptr;
  std::string error;
  decltype(&ncclGetUniqueId) get_unique_id = nullptr;
  decltype(&ncclCommInitRank) comm_init_rank = nullptr;
  decltype(&ncclCommDestroy) comm_destroy = nullptr;
  decltype(&ncclCommAbort) comm_abort = nullptr;
  decltype(&ncclCommGetAsyncError) comm_get_async_error = nullptr;
  decltype(&ncclAllReduce) all_reduce = nullptr;
  decltype(&ncclAllGather) all_gather = nullptr;
  decltype(&ncclBroadcast) broadcast = nullptr;
  decltype(&ncclGetErrorString) error_string = nullptr;
  decltype(&ncclGetVersion) get_version = nullptr;
};

const NcclLibrary& library() {
  static NcclLibrary lib;
  static std::once_flag once;
  std::call_once(once, [] {
    lib.handle = dlopen("libnccl.so.2", RTLD_NOW | RTLD_LOCAL);
    if (lib.handle == nullptr) {
      const char* e = dlerror();
      lib.error = fmt::format("cannot load libnccl.so.2: {}", e != nullptr ? e : "unknown");
      return;
    }
    auto sym = [&](auto& fn, const char* name) {
      fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(lib.handle, name));
      if (fn == nullptr && lib.error.empty()) {
        lib.error = fmt::format("libnccl.so.2 has no {}", name);
      }
    };
    sym(lib.get_unique_id, "ncclGetUniqueId");
    sym(lib.comm_init_rank, "ncclCommInitRank");
    sym(lib.comm_destroy, "ncclCommDestroy");
    sym(lib.comm_abort, "ncclCommAbort");
    sym(lib.comm_get_async_error, "ncclCommGetAsyncError");
    sym(lib.all_reduce, "ncclAllReduce");
    sym(lib.all_gather, "ncclAllGather");
    sym(lib.broadcast, "ncclBroadcast");
    sym(lib.error_string, "ncclGetErrorString");
    sym(lib.get_version, "ncclGetVersion");
  });
  return lib;
}

Status nccl_status(ncclResult_t r, const char* what) {
  if (r == ncclSuccess) return Status::ok();
  return unavailable("{}: {}", what, library().error_string(r));
}

class NcclCommunicator final : public Communicator {
 public:
  NcclCommunicator(ncclComm_t comm, int32_t rank, int32_t size)
      : comm_(comm), rank_(rank), size_(size) {}
  ~NcclCommunicator() override {
    if (comm_ != nullptr) library().comm_destroy(comm_);  // an aborted one is gone already
  }

  int32_t rank() const override { return rank_; }
  int32_t size() const override { return size_; }
  std::string_view backend() const override { return "nccl"; }

  Status all_reduce_sum(void* data, int64_t count, DType dtype,
                        platform::StreamHandle stream) override {
    if (aborted_) return unavailable("the NCCL communicator was aborted");
    ncclDataType_t type;
    if (dtype == DType::kF32) {
      type = ncclFloat32;
    } else if (dtype == DType::kBF16) {
      type = ncclBfloat16;
    } else {
      return invalid_argument("NCCL all-reduce of {}", dtype_name(dtype));
    }
    return nccl_status(library().all_reduce(data, data, static_cast<size_t>(count), type, ncclSum,
                                            comm_, static_cast<cudaStream_t>(stream.ptr)),
                       "ncclAllReduce");
  }

  Status all_gather(const void* send, void* recv, int64_t bytes_per_rank,
                    platform::StreamHandle stream) override {
    if (aborted_) return unavailable("the NCCL communicator was aborted");
    return nccl_status(
        library().all_gather(send, recv, static_cast<size_t>(bytes_per_rank), ncclUint8, comm_,
                             static_cast<cudaStream_t>(stream.ptr)),
        "ncclAllGather");
  }

  Status broadcast(void* data, int64_t bytes, int32_t root,
                   platform::StreamHandle stream) override {
    if (aborted_) return unavailable("the NCCL communicator was aborted");
    return nccl_status(library().broadcast(data, data, static_cast<size_t>(bytes), ncclUint8, root,
                                           comm_, static_cast<cudaStream_t>(stream.ptr)),
                       "ncclBroadcast");
  }

  // ncclCommAbort now, on the thread that queues the collectives: kernels waiting for a dead
  // rank return, so a wait on the stream ends; every later call fails.
  void abort(std::string_view) override {
    if (aborted_) return;
    aborted_ = true;
    if (comm_ != nullptr) library().comm_abort(comm_);
    comm_ = nullptr;
  }

  Status check() override {
    if (aborted_) return unavailable("the NCCL communicator was aborted");
    ncclResult_t async = ncclSuccess;
    KV_RETURN_IF_ERROR(
        nccl_status(library().comm_get_async_error(comm_, &async), "ncclCommGetAsyncError"));
    if (async == ncclSuccess || async == ncclInProgress) return Status::ok();
    return nccl_status(async, "NCCL (asynchronous error)");
  }

 private:
  ncclComm_t comm_ = nullptr;
  int32_t rank_;
  int32_t size_;
  bool aborted_ = false;
};

}  // namespace

Status nccl_library_status() {
  const NcclLibrary& lib = library();
  if (!lib.error.empty()) return unavailable("{}", lib.error);
  return Status::ok();
}

Result<NcclUniqueId> nccl_unique_id() {
  KV_RETURN_IF_ERROR(nccl_library_status());
  ncclUniqueId id;
  KV_RETURN_IF_ERROR(nccl_status(library().get_unique_id(&id), "ncclGetUniqueId"));
  NcclUniqueId out;
  static_assert(sizeof(id) == out.size());
  std::memcpy(out.data(), &id, out.size());
  return out;
}

Result<std::unique_ptr<Communicator>> create_nccl_communicator(const NcclUniqueId& id, int32_t rank,
                                                               int32_t size, int32_t device) {
  KV_RETURN_IF_ERROR(nccl_library_status());
  if (const cudaError_t e = cudaSetDevice(device); e != cudaSuccess) {
    return unavailable("cudaSetDevice({}): {}", device, cudaGetErrorString(e));
  }
  ncclUniqueId nid;
  std::memcpy(&nid, id.data(), id.size());
  ncclComm_t comm = nullptr;
  KV_RETURN_IF_ERROR(
      nccl_status(library().comm_init_rank(&comm, size, nid, rank), "ncclCommInitRank"));
  return std::unique_ptr<Communicator>(new NcclCommunicator(comm, rank, size));
}

}  // namespace kvserve::dist
