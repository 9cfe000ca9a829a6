#include "kvserve/router/worker_pool.h"

#include <httplib.h>

#include <chrono>

#include "kvserve/core/logging.h"
#include "kvserve/pd/messages.h"

namespace kvserve::router {
namespace {

using json = nlohmann::json;

Result<json> get_json(const std::string& url, const std::string& path, double timeout_s) {
  httplib::Client cli(url);
  cli.set_connection_timeout(std::chrono::milliseconds(static_cast<int64_t>(timeout_s * 1000)));
  cli.set_read_timeout(std::chrono::milliseconds(static_cast<int64_t>(timeout_s * 1000)));
  const auto res = cli.Get(path.c_str());
  if (!res) return unavailable("GET {}{}: {}", url, path, httplib::to_string(res.error()));
  if (res->status != 200) return unavailable("GET {}{}: HTTP {}", url, path, res->status);
  json j = json::parse(res->body, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return unavailable("GET {}{}: not JSON", url, path);
  return j;
}

}  // namespace

Result<std::pair<std::string, std::string>> parse_worker_url(const std::string& url,
                                                             const std::string& flag) {
  const std::string scheme = "http://";
  if (url.rfind(scheme, 0) != 0) {
    return invalid_argument("{}: '{}' is not a URL like http://host:port", flag, url);
  }
  std::string rest = url.substr(scheme.size());
  while (!rest.empty() && rest.back() == '/')
    rest.pop_back();
  const size_t colon = rest.rfind(':');
  if (rest.empty() || rest.find('/') != std::string::npos || colon == std::string::npos ||
      colon == 0 || colon + 1 == rest.size()) {
    return invalid_argument("{}: '{}' is not a URL like http://host:port", flag, url);
  }
  return std::pair{scheme + rest, rest.substr(0, colon)};
}

Result<std::unique_ptr<WorkerPool>> WorkerPool::create(const std::vector<std::string>& prefill,
                                                       const std::vector<std::string>& decode,
                                                       double startup_timeout_s,
                                                       double health_interval_s) {
  if (prefill.empty()) return invalid_argument("--prefill: at least one prefill server");
  if (decode.empty()) return invalid_argument("--decode: at least one decode server");
  std::unique_ptr<WorkerPool> pool(new WorkerPool());
  const auto deadline = std::chrono::steady_clock::now() +
                        std::chrono::milliseconds(static_cast<int64_t>(startup_timeout_s * 1000));
  auto discover = [&](const std::string& url, const char* flag,
                      const char* role) -> Result<std::unique_ptr<Worker>> {
    KV_ASSIGN_OR_RETURN(const auto parsed, parse_worker_url(url, flag));
    auto w = std::make_unique<Worker>();
    w->url = parsed.first;
    w->host = parsed.second;
    while (true) {
      Result<json> info = get_json(w->url, "/disaggregation/bootstrap", 5);
      if (info.is_ok()) {
        const json& j = info.value();
        const std::string mode = j.value("mode", "");
        if (mode != role) {
          return invalid_argument("{} {}: the server runs --disaggregation-mode {}, not {}", flag,
                                  url, mode, role);
        }
        w->bootstrap_port = j.value("bootstrap_port", 0);
        Result<pd::KvLayout> layout = pd::layout_from_json(j.value("layout", json()).dump());
        if (!layout.is_ok()) {
          return invalid_argument("{} {}: its /disaggregation/bootstrap layout: {}", flag, url,
                                  layout.status().message());
        }
        w->layout = std::move(layout).value();
        return w;
      }
      if (std::chrono::steady_clock::now() > deadline) {
        return unavailable("{} {}: no answer within {} s ({})", flag, url, startup_timeout_s,
                           info.status().message());
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
  };
  for (const std::string& url : prefill) {
    KV_ASSIGN_OR_RETURN(auto w, discover(url, "--prefill", "prefill"));
    pool->prefill_.push_back(std::move(w));
  }
  for (const std::string& url : decode) {
    KV_ASSIGN_OR_RETURN(auto w, discover(url, "--decode", "decode"));
    pool->decode_.push_back(std::move(w));
  }
  // Every pair must be able to work: refuse now rather than fail (or hang) per request.
  for (const auto& p : pool->prefill_) {
    for (const auto& d : pool->decode_) {
      // The check each prefill server makes at a decode server's handshake.
      if (const Status ok = pd::check_compatible(p->layout, d->layout); !ok.is_ok()) {
        return invalid_argument("prefill {} and decode {} cannot work together: {}", p->url, d->url,
                                ok.message());
      }
    }
  }
  pool->health_ =
      std::thread([raw = pool.get(), health_interval_s] { raw->health_loop(health_interval_s); });
  return pool;
}

WorkerPool::~WorkerPool() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (health_.joinable()) health_.join();
}

void WorkerPool::health_loop(double interval_s) {
  const auto interval = std::chrono::milliseconds(static_cast<int64_t>(interval_s * 1000));
  while (true) {
    for (auto* side : {&prefill_, &decode_}) {
      for (auto& w : *side) {
        httplib::Client cli(w->url);
        cli.set_connection_timeout(interval);
        cli.set_read_timeout(interval);
        const auto res = cli.Get("/health");
        const bool ok = res && res->status == 200;
        if (ok != w->healthy.exchange(ok)) {
          KV_LOG_WARN("router: {} is {}", w->url, ok ? "healthy again" : "unhealthy");
        }
      }
    }
    std::unique_lock lock(mu_);
    if (cv_.wait_for(lock, interval, [&] { return stopping_; })) return;
  }
}

Worker* WorkerPool::next_healthy(std::vector<std::unique_ptr<Worker>>& side,
                                 std::atomic<size_t>& rr) {
  for (size_t i = 0; i < side.size(); ++i) {
    Worker* w = side[rr.fetch_add(1) % side.size()].get();
    if (w->healthy) return w;
  }
  return nullptr;
}

std::optional<WorkerPool::Pair> WorkerPool::pick() {
  Pair p{next_healthy(prefill_, rr_prefill_), next_healthy(decode_, rr_decode_)};
  if (p.prefill == nullptr || p.decode == nullptr) return std::nullopt;
  return p;
}

json WorkerPool::describe() const {
  auto side = [](const std::vector<std::unique_ptr<Worker>>& ws) {
    json out = json::array();
    for (const auto& w : ws) {
      out.push_back({{"url", w->url},
                     {"healthy", w->healthy.load()},
                     {"bootstrap_port", w->bootstrap_port},
                     {"layout", json::parse(pd::layout_to_json(w->layout))}});
    }
    return out;
  };
  return {{"prefill", side(prefill_)}, {"decode", side(decode_)}};
}

}  // namespace kvserve::router
