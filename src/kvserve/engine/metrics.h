// Serving metrics in Prometheus' text format (SGLang's names, prefixed kvserve:). The engine
// thread records; the HTTP thread renders. Thread-safe.
#pragma once

#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

namespace kvserve::engine {

class Histogram {
 public:
  explicit Histogram(std::vector<double> upper_bounds);
  void observe(double v);
  // Prometheus lines for `name` with `labels` (e.g. model_name="x").
  void render(std::string& out, const std::string& name, const std::string& labels) const;
  uint64_t count() const { return count_; }
  double sum() const { return sum_; }

 private:
  std::vector<double> bounds_;
  std::vector<uint64_t> counts_;  // per bucket, not cumulative
  double sum_ = 0;
  uint64_t count_ = 0;
};

struct MetricsSnapshot {
  int64_t running = 0;
  int64_t waiting = 0;
  double token_usage = 0;  // fraction of KV slots held by requests or locked prefixes
  int64_t prompt_tokens = 0;
  int64_t cached_tokens = 0;
  int64_t generation_tokens = 0;
  int64_t requests_finished = 0;
  int64_t requests_aborted = 0;
  int64_t retractions = 0;
  double cache_hit_rate() const {
    return prompt_tokens == 0 ? 0.0 : static_cast<double>(cached_tokens) / prompt_tokens;
  }
};

class Metrics {
 public:
  Metrics();
  void on_admitted(int32_t prompt_tokens, int32_t cached_tokens);
  void on_generated(int32_t tokens);
  void on_first_token(double ttft_seconds);
  void on_inter_token(double seconds);
  void on_finished(double e2e_seconds, bool aborted);
  void on_retracted();
  void set_load(int64_t running, int64_t waiting, double token_usage);

  MetricsSnapshot snapshot() const;
  std::string render_prometheus(const std::string& model_name) const;

 private:
  mutable std::mutex mu_;
  MetricsSnapshot s_;
  Histogram ttft_;
  Histogram itl_;
  Histogram e2e_;
};

}  // namespace kvserve::engine
