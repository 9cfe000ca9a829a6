// An in-process kvserve server (the real Engine and HttpServer on a free port) for black-box
// HTTP tests, and a tiny checkpoint to serve.
#pragma once

#include <gtest/gtest.h>
#include <httplib.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>

#include <memory>
#include <nlohmann/json.hpp>
#include <thread>

#include "kvserve/engine/engine.h"
#include "kvserve/makemodel/make_model.h"
#include "kvserve/server/http_server.h"
#include "unit/model_test_util.h"

namespace kvserve::testing_util {

using json = nlohmann::json;

// One tiny checkpoint per test binary.
inline const std::filesystem::path& tiny_model() {
  static model::testing::TempDir dir;
  static const std::filesystem::path path = [] {
    makemodel::MakeModelOptions o;
    o.preset = "tiny";
    o.output = dir.path() / "tiny";
    o.seed = 3;
    EXPECT_TRUE(makemodel::make_model(o).is_ok());
    return o.output;
  }();
  return path;
}

inline engine::EngineOptions tiny_engine_options() {
  engine::EngineOptions o;
  o.model_path = tiny_model();
  o.runner.max_total_tokens = 16384;
  o.runner.max_running_requests = 128;
  return o;
}

class TestServer {
 public:
  explicit TestServer(engine::EngineOptions eo = tiny_engine_options(),
                      server::ServerOptions so = {}) {
    so.port = 0;
    auto e = engine::Engine::create(eo);
    EXPECT_TRUE(e.is_ok()) << e.status().to_string();
    engine_ = std::move(e).value();
    http_ = std::make_unique<server::HttpServer>(*engine_, so);
    EXPECT_TRUE(http_->bind().is_ok());
    thread_ = std::thread([this] { http_->run(); });
  }
  ~TestServer() {
    http_->stop();
    thread_.join();
  }

  int port() const { return http_->port(); }
  engine::Engine& engine() { return *engine_; }
  std::unique_ptr<httplib::Client> client() const {
    auto c = std::make_unique<httplib::Client>("127.0.0.1", port());
    c->set_read_timeout(120, 0);
    return c;
  }
  // POST a JSON body; returns (status, parsed body or the raw text as a string).
  std::pair<int, json> post(const std::string& path, const json& body) const {
    auto res = client()->Post(path, body.dump(), "application/json");
    if (!res) return {-1, json(httplib::to_string(res.error()))};
    json parsed = json::parse(res->body, nullptr, false);
    return {res->status, parsed.is_discarded() ? json(res->body) : parsed};
  }
  std::pair<int, json> get(const std::string& path) const {
    auto res = client()->Get(path);
    if (!res) return {-1, json(httplib::to_string(res.error()))};
    json parsed = json::parse(res->body, nullptr, false);
    return {res->status, parsed.is_discarded() ? json(res->body) : parsed};
  }
  // Waits until the engine is idle, then returns /get_server_info.
  json idle_info() const {
    json info;
    for (int i = 0; i < 400; ++i) {
      info = get("/get_server_info").second;
      if (info["num_running_reqs"] == 0 && info["num_waiting_reqs"] == 0 &&
          info["used_tokens"] == 0 && info["invariant_checks"].get<int64_t>() > last_checks_) {
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    last_checks_ = info["invariant_checks"].get<int64_t>();
    return info;
  }

 private:
  std::unique_ptr<engine::Engine> engine_;
  std::unique_ptr<server::HttpServer> http_;
  std::thread thread_;
  mutable int64_t last_checks_ = 0;
};

// A raw TCP connection to the server, for what an HTTP client library will not send.
class RawConnection {
 public:
  explicit RawConnection(int port) {
    fd_ = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<uint16_t>(port));
    a.sin_addr.s_addr = htonl(0x7f000001);
    connected_ = connect(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
  }
  ~RawConnection() { close_now(); }
  RawConnection(const RawConnection&) = delete;
  RawConnection& operator=(const RawConnection&) = delete;

  bool connected() const { return connected_; }
  bool send(const std::string& bytes) {
    return ::send(fd_, bytes.data(), bytes.size(), MSG_NOSIGNAL) ==
           static_cast<ssize_t>(bytes.size());
  }
  // Reads until the server closes, `until` appears, or `timeout` passes.
  std::string read(std::chrono::milliseconds timeout, const std::string& until = "") {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (until.empty() || received_.find(until) == std::string::npos) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
                            deadline - std::chrono::steady_clock::now())
                            .count();
      if (left <= 0) break;
      pollfd p{fd_, POLLIN, 0};
      if (poll(&p, 1, static_cast<int>(left)) <= 0) break;
      char buf[65536];
      const ssize_t n = recv(fd_, buf, sizeof buf, 0);
      if (n <= 0) {
        closed_by_server_ = true;
        break;
      }
      received_.append(buf, static_cast<size_t>(n));
    }
    return received_;
  }
  bool closed_by_server() const { return closed_by_server_; }
  void close_now() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

 private:
  int fd_ = -1;
  bool connected_ = false;
  bool closed_by_server_ = false;
  std::string received_;
};

// The status code of the first response in `raw` (0 when there is none).
inline int status_of(const std::string& raw) {
  if (raw.rfind("HTTP/1.1 ", 0) != 0 || raw.size() < 12) return 0;
  return std::atoi(raw.substr(9, 3).c_str());
}

// Greedy /generate of token ids: the output ids.
inline std::vector<int32_t> greedy_ids(const TestServer& s, const std::vector<int32_t>& prompt,
                                       int max_new, json* meta = nullptr) {
  const auto [status, body] = s.post(
      "/generate", {{"input_ids", prompt},
                    {"sampling_params",
                     {{"max_new_tokens", max_new}, {"temperature", 0}, {"ignore_eos", true}}}});
  EXPECT_EQ(status, 200) << body.dump();
  if (meta) *meta = body["meta_info"];
  return status == 200 ? body["output_ids"].get<std::vector<int32_t>>() : std::vector<int32_t>{};
}

}  // namespace kvserve::testing_util
