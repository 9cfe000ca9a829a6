// StreamDispatcher: delivers the engine's per-step output to the request streams on its own
// thread, as SGLang's scheduler hands a batch of outputs to its detokenizer process. The engine
// thread pays one queue push and one wake-up per step instead of one wake-up per request; the
// dispatcher wakes each request's reader. Events of one request stay in order.
#pragma once

#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include "kvserve/engine/request_stream.h"

namespace kvserve::engine {

using StreamOutputs = std::vector<std::pair<std::shared_ptr<RequestStream>, StreamEvent>>;

class StreamDispatcher {
 public:
  StreamDispatcher();
  ~StreamDispatcher();  // delivers everything submitted, then stops

  void submit(StreamOutputs outputs);

 private:
  void loop();

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<StreamOutputs> queue_;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace kvserve::engine
