// The router's workers: the prefill and decode servers it was given, what each says about itself
// (GET /disaggregation/bootstrap: role, control-plane port, KV layout), health, and the choice of
// a (prefill, decode) pair per request.
//
// Health is only ever the latest check (GET /health every interval): a server that failed comes
// back with its next good answer; nothing is remembered against it (SGLang issue 13054).
#pragma once

#include <atomic>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "kvserve/core/status.h"
#include "kvserve/pd/layout.h"

namespace kvserve::router {

struct Worker {
  std::string url;             // "http://host:port"
  std::string host;            // for bootstrap_host
  int32_t bootstrap_port = 0;  // prefill servers
  pd::KvLayout layout;
  std::atomic<bool> healthy{true};
};

// "http://host:port" (no path); kInvalidArgument naming `flag` otherwise.
Result<std::pair<std::string, std::string>> parse_worker_url(const std::string& url,
                                                             const std::string& flag);

class WorkerPool {
 public:
  // Asks every server for its role and layout (retrying for up to `startup_timeout_s` while one
  // does not answer yet); kInvalidArgument when a server has another role, or when a prefill and
  // a decode server's KV layouts cannot work together (each mismatch named).
  static Result<std::unique_ptr<WorkerPool>> create(const std::vector<std::string>& prefill,
                                                    const std::vector<std::string>& decode,
                                                    double startup_timeout_s,
                                                    double health_interval_s);
  ~WorkerPool();

  // A healthy pair, round robin on each side; nullopt when either side has none healthy.
  struct Pair {
    Worker* prefill = nullptr;
    Worker* decode = nullptr;
  };
  std::optional<Pair> pick();
  nlohmann::json describe() const;
  Worker* any_decode() { return decode_.front().get(); }

 private:
  WorkerPool() = default;
  void health_loop(double interval_s);
  static Worker* next_healthy(std::vector<std::unique_ptr<Worker>>& side, std::atomic<size_t>& rr);

  std::vector<std::unique_ptr<Worker>> prefill_;
  std::vector<std::unique_ptr<Worker>> decode_;
  std::atomic<size_t> rr_prefill_{0};
  std::atomic<size_t> rr_decode_{0};
  std::mutex mu_;
  std::condition_variable cv_;
  bool stopping_ = false;
  std::thread health_;
};

}  // namespace kvserve::router
