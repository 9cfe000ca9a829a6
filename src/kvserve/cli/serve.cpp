// kvserve serve: the OpenAI-compatible HTTP server (SGLang's launch_server arguments).
#include <fmt/format.h>
#include <pthread.h>
#include <signal.h>
#include <sys/resource.h>
#include <unistd.h>

#include <atomic>
#include <thread>

#include "kvserve/cli/commands.h"
#include "kvserve/cli/default_model.h"
#include "kvserve/cli/runner_options.h"
#include "kvserve/core/logging.h"
#include "kvserve/engine/engine.h"
#include "kvserve/model/model_runner.h"
#include "kvserve/model/whisper_front_end.h"
#include "kvserve/server/http_server.h"
#include "kvserve/server/transcription_server.h"

namespace kvserve::cli {
namespace {

struct ServeOptions {
  engine::EngineOptions engine;
  std::string disagg_mode = "null";
  std::string disagg_backend = "ucx";
  server::ServerOptions server;
  mem::EncoderKvLayout encoder_kv_layout = mem::EncoderKvLayout::kAligned;  // Whisper only
};

int load_failure(const Status& s) {
  fmt::print(stderr, "kvserve serve: {}\n", s.message());
  return s.code() == StatusCode::kInvalidArgument || s.code() == StatusCode::kNotFound ? 2 : 1;
}

// Serves until SIGINT / SIGTERM (which must be blocked in `signals` by the caller): one thread
// takes the signal (sigwait) and calls `shutdown`, which stops accepting and ends the work in
// flight, so that http.run() returns.
template <typename Server, typename Shutdown>
int serve_until_signal(Server& http, const std::string& host, sigset_t signals, Shutdown shutdown) {
  std::thread signal_thread([&] {
    int sig = 0;
    sigwait(&signals, &sig);
    KV_LOG_INFO("received signal {}; shutting down", sig);
    shutdown();
  });
  KV_LOG_INFO("The server is fired up and ready to roll! http://{}:{}", host, http.port());
  http.run();
  // run() returned: stop() was called (by the signal thread). Wake it if it is still waiting.
  pthread_kill(signal_thread.native_handle(), SIGTERM);
  signal_thread.join();
  KV_LOG_INFO("server stopped");
  return 0;
}

// A Whisper checkpoint: the engine (its encoder-decoder path) behind OpenAI's
// /v1/audio/transcriptions; the tokenizer and feature extractor serve the HTTP threads.
int run_serve_whisper(ServeOptions o, sigset_t signals) {
  engine::EngineOptions& e = o.engine;
  if (e.runner.max_running_requests <= 0) e.runner.max_running_requests = 8;
  e.runner.encoder_kv_layout = o.encoder_kv_layout;
  KV_LOG_INFO("kvserve serve: loading the Whisper checkpoint {} on {}", e.model_path.string(),
              e.runner.device.to_string());
  auto engine = engine::Engine::create(e);
  if (!engine.is_ok()) return load_failure(engine.status());
  auto front_end = model::WhisperFrontEnd::load(e.model_path, *(*engine)->whisper_config(),
                                                *(*engine)->whisper_generation_config());
  if (!front_end.is_ok()) return load_failure(front_end.status());
  KV_LOG_INFO("speech recognition: {}", (*engine)->summary());
  server::TranscriptionServer http(**engine, **front_end, e.model_path.string(), o.server);
  if (Status s = http.bind(); !s.is_ok()) {
    fmt::print(stderr, "kvserve serve: {}\n", s.message());
    return 1;
  }
  // Stop accepting, then end what is in flight (aborted: 503), so the HTTP workers return.
  return serve_until_signal(http, o.server.host, signals, [&] {
    http.stop();
    (*engine)->shutdown();
  });
}

// Every connection is a descriptor: raise the soft limit to the hard one (commonly 1024 of
// 1048576), so that --max-connections, not the limit, decides.
void raise_open_file_limit(int wanted) {
  rlimit lim{};
  if (getrlimit(RLIMIT_NOFILE, &lim) != 0 || lim.rlim_cur == lim.rlim_max) return;
  lim.rlim_cur = lim.rlim_max;
  if (setrlimit(RLIMIT_NOFILE, &lim) != 0) return;
  if (lim.rlim_cur != RLIM_INFINITY && lim.rlim_cur < static_cast<rlim_t>(wanted) + 256) {
    KV_LOG_WARN("the open file limit ({}) is below --max-connections {}", lim.rlim_cur, wanted);
  }
}

int run_serve(ServeOptions o) {
  raise_open_file_limit(o.server.max_connections);
  std::string model_path = o.engine.model_path.string();
  if (!resolve_model_path(model_path, "serve")) return 2;
  o.engine.model_path = model_path;
  // SIGINT / SIGTERM are taken by one thread (sigwait) so every other thread runs undisturbed.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  if (Status s = read_kernel_switches(o.engine.runner); !s.is_ok()) return load_failure(s);
  {
    auto mode = engine::parse_disagg_mode(o.disagg_mode);
    if (!mode.is_ok()) return load_failure(mode.status());
    o.engine.disagg.mode = mode.value();
    auto backend = disagg::parse_transport_kind(o.disagg_backend);
    if (!backend.is_ok()) {
      return load_failure(
          invalid_argument("--disaggregation-transfer-backend: {}", backend.status().message()));
    }
    o.engine.disagg.transport = backend.value();
  }
  if (model::is_whisper_checkpoint(o.engine.model_path)) {
    return run_serve_whisper(std::move(o), signals);
  }

  KV_LOG_INFO("kvserve serve: loading {} on {}", o.engine.model_path.string(),
              o.engine.runner.device.to_string());
  o.engine.runner.show_progress = true;
  // A tensor-parallel group that fails (a worker died) cannot serve again: the forward's
  // requests have failed; stop the server through the signal path (the others end with abort).
  // The exit status says so: the server stopped because it broke, not because it was asked to.
  static std::atomic<bool> tp_failed{false};
  o.engine.runner.on_tp_failure = [](const Status&) {
    tp_failed = true;
    kill(getpid(), SIGTERM);
  };
  auto engine = engine::Engine::create(o.engine);
  if (!engine.is_ok()) return load_failure(engine.status());
  KV_LOG_INFO("{}", (*engine)->summary());
  KV_LOG_INFO("max_total_num_tokens={}, max_running_requests={}, context_len={}",
              (*engine)->max_total_tokens(), (*engine)->max_running_requests(),
              (*engine)->context_len());
  server::HttpServer http(**engine, o.server);
  if (Status s = http.bind(); !s.is_ok()) {
    fmt::print(stderr, "kvserve serve: {}\n", s.message());
    return 1;
  }
  // Stop accepting, then end what is in flight (streams get finish_reason abort), so the HTTP
  // workers return promptly and run() comes back.
  const int rc = serve_until_signal(http, o.server.host, signals, [&] {
    http.stop();
    (*engine)->shutdown();
  });
  if (tp_failed) {
    fmt::print(stderr, "kvserve serve: stopped because a tensor-parallel rank failed\n");
    return 1;
  }
  return rc;
}

}  // namespace

static void add_model_options(CLI::App* cmd, engine::EngineOptions& e) {
  cmd->add_option("--model-path", e.model_path,
                  "Hugging Face checkpoint directory (default: the demo model, models/demo-lm)");
  add_device_option(cmd, e.runner.device);
  cmd->add_option("--page-size", e.runner.page_size)->capture_default_str();
  add_attention_backend_option(
      cmd, e.runner.attention_backend,
      "cpu or native (CPU), cuda-paged or cuda-ragged (CUDA); default: the device's "
      "(a Whisper checkpoint on CUDA with the ragged layout: cuda-ragged)");
  add_kv_cache_dtype_option(cmd, e.runner.kv_cache_dtype);
  cmd->add_option("--max-total-tokens", e.runner.max_total_tokens, "KV cache size in tokens");
  cmd->add_option("--mem-fraction-static", e.runner.mem_fraction_static,
                  "Fraction of free memory for the KV cache");
  cmd->add_option("--max-running-requests", e.runner.max_running_requests);
  cmd->add_option("--context-length", e.runner.context_length);
  add_cuda_graph_options(cmd, e.runner);
  add_gpu_memory_option(cmd, e.runner);
  add_tensor_parallel_options(cmd, e.runner);
  cmd->add_option("--chunked-prefill-size", e.scheduler.chunked_prefill_size,
                  "Tokens per prefill chunk (-1: no chunking)")
      ->capture_default_str();
  cmd->add_option("--max-prefill-tokens", e.scheduler.max_prefill_tokens)->capture_default_str();
  cmd->add_option("--schedule-policy", e.schedule_policy, "fcfs, lpm, lof, random, dfs-weight")
      ->capture_default_str();
  cmd->add_option("--schedule-conservativeness", e.scheduler.schedule_conservativeness)
      ->capture_default_str();
  cmd->add_flag("--disable-radix-cache", e.disable_radix_cache);
  cmd->add_option("--radix-eviction-policy", e.radix_eviction_policy, "lru or lfu")
      ->capture_default_str();
  cmd->add_flag("--allow-auto-truncate", e.allow_auto_truncate,
                "Truncate prompts longer than the context instead of rejecting them");
}

// Prefill/decode disaggregation (docs/disaggregation.md), SGLang's flag names.
static void add_disaggregation_options(CLI::App* cmd, ServeOptions& o) {
  engine::DisaggOptions& d = o.engine.disagg;
  cmd->add_option("--disaggregation-mode", o.disagg_mode,
                  "null (a server of its own), prefill or decode")
      ->capture_default_str();
  cmd->add_option("--disaggregation-transfer-backend", o.disagg_backend,
                  "ucx (any two processes), cuda-ipc (two processes on one GPU host) or loopback "
                  "(one process: tests)")
      ->capture_default_str();
  cmd->add_option("--disaggregation-bootstrap-port", d.bootstrap_port,
                  "prefill: the control-plane (ZeroMQ) port decode servers connect to; 0: any")
      ->check(CLI::Range(0, 65535))
      ->capture_default_str();
  cmd->add_option("--disaggregation-bootstrap-timeout", d.bootstrap_timeout_s,
                  "Seconds a request may wait for its other half")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd->add_option("--disaggregation-transfer-timeout", d.transfer_timeout_s,
                  "Seconds from the destination pages to the KV's arrival (waiting + transferring)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd->add_option("--disaggregation-heartbeat-interval", d.heartbeat_interval_s,
                  "Seconds between a decode server's pings to its prefill servers")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd->add_option("--disaggregation-heartbeat-timeout", d.heartbeat_timeout_s,
                  "Seconds of silence after which a peer is dead and its requests fail")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd->add_option("--disaggregation-staging-buffer-mb", d.staging_buffer_mb,
                  "MiB of a staging buffer KV moves through (gather, one write, scatter), needed "
                  "on both sides of a pair; lets the two sides' KV dtypes differ; 0: only where "
                  "the backend cannot reach the pool (ucx with a GPU pool: 256 MiB of pinned host "
                  "memory)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  cmd->add_option("--disaggregation-ucx-transports", d.ucx_transports,
                  "UCX transports (UCX_TLS syntax, e.g. tcp or sm); default: UCX's choice");
  cmd->add_option("--disaggregation-test-fail-probability", d.faults.fail_probability,
                  "Tests only: fail this fraction of KV transfers")
      ->check(CLI::Range(0.0, 1.0));
  cmd->add_option("--disaggregation-test-drop-probability", d.faults.drop_probability,
                  "Tests only: lose this fraction of KV transfers (they time out)")
      ->check(CLI::Range(0.0, 1.0));
  cmd->add_option("--disaggregation-test-delay-ms", d.faults.delay_ms,
                  "Tests only: every KV transfer takes at least this long")
      ->check(CLI::NonNegativeNumber);
}

Command add_serve_command(CLI::App& app) {
  auto o = std::make_shared<ServeOptions>();
  CLI::App* cmd =
      app.add_subcommand("serve",
                         "Serve a model over HTTP (OpenAI API and /generate; a Whisper checkpoint: "
                         "/v1/audio/transcriptions)");
  add_model_options(cmd, o->engine);
  cmd->add_option("--host", o->server.host)->capture_default_str();
  cmd->add_option("--port", o->server.port, "0: any free port")->capture_default_str();
  cmd->add_option("--api-key", o->server.api_key, "Require Authorization: Bearer KEY");
  cmd->add_option("--served-model-name", o->server.served_model_name);
  add_encoder_kv_layout_option(cmd, o->encoder_kv_layout,
                               "Whisper checkpoints: aligned (default) or ragged encoder KV rows");
  cmd->add_option("--max-queued-requests", o->server.max_queued_requests,
                  "With this many requests waiting, refuse new ones with 503 and Retry-After "
                  "(0: no limit)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  cmd->add_option("--max-connections", o->server.max_connections,
                  "Open HTTP connections served at once; beyond: 503 with Retry-After")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd->add_option("--http-header-timeout", o->server.header_timeout_s,
                  "Seconds a client has to send a whole request head")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd->add_option("--http-keep-alive-timeout", o->server.keep_alive_timeout_s,
                  "Seconds an idle keep-alive connection stays open")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd->add_option("--sampling-defaults", o->server.sampling_defaults,
                  "model: generation_config.json's temperature/top_p/top_k/min_p/"
                  "repetition_penalty for what a request leaves out; openai: the API's defaults")
      ->check(CLI::IsMember({"model", "openai"}))
      ->capture_default_str();
  add_disaggregation_options(cmd, *o);
  return {cmd, [o] { return run_serve(*o); }};
}

}  // namespace kvserve::cli
