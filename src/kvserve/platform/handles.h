// Opaque stream, event and graph handles of the platform layer (fmt-free: CUDA sources include it).
#pragma once

namespace kvserve::platform {

// The platform that created a handle interprets it. A null StreamHandle is the platform's current
// stream (Platform::current_stream: the device's default stream unless a caller set another).
struct StreamHandle {
  void* ptr = nullptr;
};
struct EventHandle {
  void* ptr = nullptr;
};
// A captured, instantiated graph of device work (Platform::end_capture).
struct GraphHandle {
  void* ptr = nullptr;
};

}  // namespace kvserve::platform
