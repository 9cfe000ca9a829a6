#include "kvserve/engine/stream_dispatcher.h"

#include <pthread.h>

namespace kvserve::engine {

StreamDispatcher::StreamDispatcher() : thread_([this] { loop(); }) {}

StreamDispatcher::~StreamDispatcher() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_one();
  thread_.join();
}

void StreamDispatcher::submit(StreamOutputs outputs) {
  if (outputs.empty()) return;
  {
    std::lock_guard<std::mutex> lock(mu_);
    queue_.push_back(std::move(outputs));
  }
  cv_.notify_one();
}

void StreamDispatcher::loop() {
  pthread_setname_np(pthread_self(), "kvserve-output");
  std::deque<StreamOutputs> batches;
  while (true) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stopping, and everything delivered
      batches.swap(queue_);
    }
    for (StreamOutputs& batch : batches) {
      for (auto& [stream, event] : batch)
        stream->push(std::move(event));
    }
    batches.clear();
  }
}

}  // namespace kvserve::engine
