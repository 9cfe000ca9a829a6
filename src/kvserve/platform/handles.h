// Opaque stream and event handles of the platform layer (fmt-free: CUDA sources include it).
#pragma once

namespace kvserve::platform {

// The platform that created a handle interprets it. A null StreamHandle is the default stream.
struct StreamHandle {
  void* ptr = nullptr;
};
struct EventHandle {
  void* ptr = nullptr;
};

}  // namespace kvserve::platform
