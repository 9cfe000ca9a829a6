#include "kvserve/engine/metrics.h"

#include <fmt/format.h>

#include <algorithm>

namespace kvserve::engine {

Histogram::Histogram(std::vector<double> upper_bounds)
    : bounds_(std::move(upper_bounds)), counts_(bounds_.size() + 1) {}

void Histogram::observe(double v) {
  const size_t i = std::lower_bound(bounds_.begin(), bounds_.end(), v) - bounds_.begin();
  ++counts_[i];
  sum_ += v;
  ++count_;
}

void Histogram::render(std::string& out, const std::string& name, const std::string& labels) const {
  uint64_t cumulative = 0;
  for (size_t i = 0; i < bounds_.size(); ++i) {
    cumulative += counts_[i];
    out += fmt::format("{}_bucket{{{},le=\"{}\"}} {}\n", name, labels, bounds_[i], cumulative);
  }
  out += fmt::format("{}_bucket{{{},le=\"+Inf\"}} {}\n", name, labels, count_);
  out += fmt::format("{}_sum{{{}}} {}\n", name, labels, sum_);
  out += fmt::format("{}_count{{{}}} {}\n", name, labels, count_);
}

Metrics::Metrics()
    : ttft_({0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5,
             0.75,  1,     2.5,  5,    7.5,  10,   15,   20,  25,   30}),
      itl_({0.0005, 0.001, 0.002, 0.005, 0.01, 0.015, 0.02, 0.025, 0.03, 0.04, 0.05,
            0.075,  0.1,   0.15,  0.2,   0.3,  0.4,   0.5,  0.75,  1,    2.5}),
      e2e_({0.1, 0.25, 0.5, 1, 2, 3, 4, 5, 6, 8, 10, 20, 40, 60, 80, 100, 150, 200, 300}) {}

void Metrics::on_admitted(int32_t prompt_tokens, int32_t cached_tokens) {
  std::lock_guard<std::mutex> lock(mu_);
  s_.prompt_tokens += prompt_tokens;
  s_.cached_tokens += cached_tokens;
}

void Metrics::on_generated(int32_t tokens) {
  std::lock_guard<std::mutex> lock(mu_);
  s_.generation_tokens += tokens;
}

void Metrics::on_first_token(double ttft_seconds) {
  std::lock_guard<std::mutex> lock(mu_);
  ttft_.observe(ttft_seconds);
}

void Metrics::on_inter_token(double seconds) {
  std::lock_guard<std::mutex> lock(mu_);
  itl_.observe(seconds);
}

void Metrics::on_finished(double e2e_seconds, bool aborted) {
  std::lock_guard<std::mutex> lock(mu_);
  e2e_.observe(e2e_seconds);
  ++s_.requests_finished;
  if (aborted) ++s_.requests_aborted;
}

void Metrics::on_retracted() {
  std::lock_guard<std::mutex> lock(mu_);
  ++s_.retractions;
}

void Metrics::set_load(int64_t running, int64_t waiting, double token_usage) {
  std::lock_guard<std::mutex> lock(mu_);
  s_.running = running;
  s_.waiting = waiting;
  s_.token_usage = token_usage;
}

MetricsSnapshot Metrics::snapshot() const {
  std::lock_guard<std::mutex> lock(mu_);
  return s_;
}

std::string Metrics::render_prometheus(const std::string& model_name) const {
  std::lock_guard<std::mutex> lock(mu_);
  const std::string labels = fmt::format("model_name=\"{}\"", model_name);
  std::string out;
  auto scalar = [&](const char* name, const char* type, const char* help, double v) {
    out += fmt::format("# HELP {} {}\n# TYPE {} {}\n{}{{{}}} {}\n", name, help, name, type, name,
                       labels, v);
  };
  scalar("kvserve:num_running_reqs", "gauge", "Requests in the running batch.", s_.running);
  scalar("kvserve:num_queue_reqs", "gauge", "Requests waiting to be scheduled.", s_.waiting);
  scalar("kvserve:token_usage", "gauge", "Fraction of KV cache slots in use.", s_.token_usage);
  scalar("kvserve:cache_hit_rate", "gauge", "Prompt tokens served from the prefix cache.",
         s_.cache_hit_rate());
  scalar("kvserve:prompt_tokens_total", "counter", "Prompt tokens admitted.", s_.prompt_tokens);
  scalar("kvserve:cached_tokens_total", "counter", "Prompt tokens found in the prefix cache.",
         s_.cached_tokens);
  scalar("kvserve:generation_tokens_total", "counter", "Tokens generated.", s_.generation_tokens);
  scalar("kvserve:num_requests_total", "counter", "Requests finished.", s_.requests_finished);
  scalar("kvserve:num_aborted_requests_total", "counter", "Requests aborted.", s_.requests_aborted);
  scalar("kvserve:num_retracted_requests_total", "counter", "Decode retractions.", s_.retractions);
  auto hist = [&](const char* name, const char* help, const Histogram& h) {
    out += fmt::format("# HELP {} {}\n# TYPE {} histogram\n", name, help, name);
    h.render(out, name, labels);
  };
  hist("kvserve:time_to_first_token_seconds", "Time to first token.", ttft_);
  hist("kvserve:inter_token_latency_seconds", "Time between consecutive tokens.", itl_);
  hist("kvserve:e2e_request_latency_seconds", "End-to-end request latency.", e2e_);
  return out;
}

}  // namespace kvserve::engine
