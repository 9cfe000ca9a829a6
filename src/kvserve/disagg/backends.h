// The backends' constructors, called only by create_kv_transport (kv_transport.cpp).
#pragma once

#include <memory>

#include "kvserve/core/status.h"
#include "kvserve/disagg/kv_transport.h"

namespace kvserve::disagg {

Result<std::unique_ptr<KvTransport>> create_loopback_transport(const TransportOptions& options);
// kUnavailable when UCX cannot start (no usable transport, a bad transports list).
Result<std::unique_ptr<KvTransport>> create_ucx_transport(const TransportOptions& options);
// kUnavailable in a build without CUDA or without a CUDA platform in the options.
Result<std::unique_ptr<KvTransport>> create_cuda_ipc_transport(const TransportOptions& options);

}  // namespace kvserve::disagg
