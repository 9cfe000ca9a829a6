// kvserve router: the front of prefill/decode disaggregation (docs/disaggregation.md).
#include <fmt/format.h>
#include <pthread.h>
#include <signal.h>

#include <thread>

#include "kvserve/cli/commands.h"
#include "kvserve/core/logging.h"
#include "kvserve/router/router.h"

namespace kvserve::cli {
namespace {

int run_router(const router::RouterOptions& o) {
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  auto r = router::Router::create(o);
  if (!r.is_ok()) {
    fmt::print(stderr, "kvserve router: {}\n", r.status().message());
    return r.status().code() == StatusCode::kInvalidArgument ? 2 : 1;
  }
  router::Router& rt = *r.value();
  if (Status s = rt.bind(); !s.is_ok()) {
    fmt::print(stderr, "kvserve router: {}\n", s.message());
    return 1;
  }
  std::thread signal_thread([&] {
    int sig = 0;
    sigwait(&signals, &sig);
    KV_LOG_INFO("received signal {}; shutting down", sig);
    rt.stop();
  });
  KV_LOG_INFO("router: {} prefill and {} decode servers; http://{}:{}", o.prefill.size(),
              o.decode.size(), o.host, rt.port());
  rt.run();
  pthread_kill(signal_thread.native_handle(), SIGTERM);
  signal_thread.join();
  return 0;
}

}  // namespace

Command add_router_command(CLI::App& app) {
  auto o = std::make_shared<router::RouterOptions>();
  CLI::App* cmd = app.add_subcommand(
      "router",
      "Route requests to prefill and decode servers (--disaggregation-mode prefill / decode)");
  cmd->add_option("--prefill", o->prefill, "A prefill server's URL (repeat for several)")
      ->required();
  cmd->add_option("--decode", o->decode, "A decode server's URL (repeat for several)")->required();
  cmd->add_option("--host", o->host)->capture_default_str();
  cmd->add_option("--port", o->port, "0: any free port")
      ->check(CLI::Range(0, 65535))
      ->capture_default_str();
  cmd->add_option("--health-check-interval", o->health_interval_s,
                  "Seconds between health checks of every server")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd->add_option("--startup-timeout", o->startup_timeout_s,
                  "Seconds to wait for the servers to answer at startup")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd->add_option("--request-timeout", o->request_timeout_s,
                  "Seconds a server may stay silent during a request")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  return {cmd, [o] { return run_router(*o); }};
}

}  // namespace kvserve::cli
