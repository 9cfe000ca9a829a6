#include "kvserve/engine/engine.h"

#include <pthread.h>

#include <tuple>

#include <fmt/format.h>

#include <random>

#include "kvserve/core/logging.h"
#include "kvserve/disagg/kv_runs.h"
#include "kvserve/mem/common.h"
#include "kvserve/mem/host_kv_memory.h"
#include "kvserve/model/rope.h"

namespace kvserve::engine {
namespace {

// Request ids and unseeded sampling seeds: one generator per submitting thread, seeded once
// (std::random_device per request costs a syscall on the hot path).
std::mt19937_64& thread_rng() {
  static thread_local std::mt19937_64 rng{std::random_device{}()};
  return rng;
}

std::string random_rid() {
  return fmt::format("{:016x}{:016x}", thread_rng()(), thread_rng()());
}

// How often an idle disaggregated engine looks at its control plane and transfers.
constexpr std::chrono::milliseconds kDisaggPollInterval{1};
// How often it looks while a hand-off it holds waits on the other side (metadata, a write's
// completion, the prefill's done): each wait is on a request's TTFT, and a hand-off crosses
// three of them (tools/disagg_bench.sh: at 1 ms they cost ~1.5 ms of TTFT per request).
constexpr std::chrono::microseconds kDisaggBusyPollInterval{100};

}  // namespace

Result<std::unique_ptr<Engine>> Engine::create(const EngineOptions& options) {
  std::unique_ptr<Engine> e(new Engine());
  e->options_ = options;
  KV_ASSIGN_OR_RETURN(const SchedulePolicy policy, parse_schedule_policy(options.schedule_policy));
  KV_ASSIGN_OR_RETURN(const mem::EvictionPolicy eviction,
                      mem::parse_eviction_policy(options.radix_eviction_policy));
  if (options.scheduler.chunked_prefill_size > 0 &&
      options.scheduler.chunked_prefill_size < options.runner.page_size) {
    return invalid_argument("--chunked-prefill-size ({}) must be at least --page-size ({})",
                            options.scheduler.chunked_prefill_size, options.runner.page_size);
  }
  if (options.scheduler.max_prefill_tokens <= 0) {
    return invalid_argument("--max-prefill-tokens must be positive, got {}",
                            options.scheduler.max_prefill_tokens);
  }
  model::ModelRunnerOptions runner_options = options.runner;
  runner_options.reserved_device_bytes = device_staging_bytes(options);
  KV_ASSIGN_OR_RETURN(e->runner_, model::ModelRunner::create(options.model_path, runner_options));
  e->config_ = e->runner_->config();
  KV_ASSIGN_OR_RETURN(e->generation_config_,
                      checkpoint::load_generation_config(options.model_path));
  if (auto tok = tokenizer::Tokenizer::from_directory(options.model_path); tok.is_ok()) {
    e->tokenizer_ = std::move(tok).value();
  } else if (tok.status().code() != StatusCode::kNotFound) {
    return tok.status();
  } else {
    KV_LOG_WARN("no tokenizer in {}: requests must carry token ids", options.model_path.string());
  }
  SchedulerOptions so = options.scheduler;
  so.policy = policy;
  so.eos_token_ids = e->generation_config_.eos_token_ids;
  if (so.eos_token_ids.empty()) so.eos_token_ids = e->config_.eos_token_ids;
  if (so.eos_token_ids.empty() && e->tokenizer_ && e->tokenizer_->eos_token_id()) {
    so.eos_token_ids = {*e->tokenizer_->eos_token_id()};
  }
  model::ModelRunner& r = *e->runner_;
  if (r.is_encoder_decoder()) {
    // Whisper: eos from generation_config.json (ModelConfig's), the model's logit rules for every
    // request, and nothing shared between requests (a ChunkCache); the scheduler lays out rows
    // as [encoder region | decoder region] (mem::EncoderSplit).
    const checkpoint::WhisperGenerationConfig& g = r.whisper_generation_config();
    e->whisper_config_ = r.whisper_config();
    e->whisper_generation_ = g;
    so.eos_token_ids = e->config_.eos_token_ids;
    so.encoder = mem::EncoderSplit{r.page_size(), r.encoder_kv_layout()};
    auto rules = std::make_shared<LogitRules>(whisper_logit_rules(g));
    if (!rules->empty()) e->model_logit_rules_ = std::move(rules);
    e->encoder_input_size_ = r.encoder_input_size();
    e->encoder_len_ = r.encoder_len();
    e->encoder_reserved_ = r.encoder_reserved_len(e->encoder_len_);
    // A request is admitted while its row and output budget stay below the free slots
    // (PrefillAdder), so a pool of exactly one row would never admit one: one slot more.
    const int64_t row =
        mem::ceil_align(e->encoder_reserved_ + r.context_len() + 1, int64_t{r.page_size()});
    if (r.max_total_tokens() < row) {
      return invalid_argument(
          "--max-total-tokens {}: one request's row ({} positions: the encoder region and the "
          "decoder's {}) does not fit",
          r.max_total_tokens(), row, r.context_len());
    }
  }
  // dynamic / longrope rope scaling: a forward's frequencies follow its request's length, so a
  // prompt split into chunks, or one reusing a prefix another request computed, would rotate its
  // keys differently from one whole forward (docs/rope-scaling.md): no radix cache, no chunks.
  const bool length_rope = model::rope_depends_on_length(e->config_.rope_scaling);
  if (length_rope && (!options.disable_radix_cache || so.chunked_prefill_size > 0)) {
    KV_LOG_WARN(
        "rope_scaling {} follows each request's length: the radix cache and chunked prefill are "
        "off (docs/rope-scaling.md)",
        e->config_.rope_scaling.rope_type);
    so.chunked_prefill_size = 0;
  }
  const bool chunk_cache = options.disable_radix_cache || r.is_encoder_decoder() || length_rope;
  // The scheduler owns the host side of the KV memory; the runner its device side.
  mem::HostKvMemory memory(
      r.kv_shape(), chunk_cache ? mem::PrefixCacheKind::kChunk : mem::PrefixCacheKind::kRadix,
      eviction);
  e->scheduler_ =
      std::make_unique<Scheduler>(r, std::move(memory), e->tokenizer_.get(), so, &e->metrics_);
  e->context_len_ = r.context_len();
  e->max_total_tokens_ = r.max_total_tokens();
  e->max_running_requests_ = r.max_running_requests();
  e->attention_backend_ = std::string(r.backend().name());
  e->summary_ = fmt::format(
      "{}; chunked_prefill_size {}, max_prefill_tokens {}, schedule_policy {}, {} cache",
      r.summary(), so.chunked_prefill_size, so.max_prefill_tokens, schedule_policy_name(policy),
      chunk_cache ? "chunk" : "radix");
  if (options.disagg.mode != DisaggMode::kNone) KV_RETURN_IF_ERROR(e->init_disaggregation());
  e->status_.scheduler = e->scheduler_->stats();  // /get_server_info is right before any step
  e->status_.disagg = e->scheduler_->disagg_stats();
  e->dispatcher_ = std::make_unique<StreamDispatcher>();
  e->scheduler_->set_early_outputs(
      [d = e->dispatcher_.get()](StreamOutputs out) { d->submit(std::move(out)); });
  e->thread_ = std::thread([raw = e.get()] { raw->loop(); });
  return e;
}

Status Engine::init_disaggregation() {
  const DisaggOptions& o = options_.disagg;
  if (runner_->is_encoder_decoder()) {
    return invalid_argument("--disaggregation-mode {}: encoder-decoder models are not supported",
                            disagg_mode_name(o.mode));
  }
  if (o.bootstrap_timeout_s <= 0 || o.transfer_timeout_s <= 0 || o.heartbeat_interval_s <= 0 ||
      o.heartbeat_timeout_s <= o.heartbeat_interval_s) {
    return invalid_argument(
        "disaggregation timeouts must be positive and the heartbeat timeout longer than its "
        "interval");
  }
  disagg::TransportOptions to;
  to.kind = o.transport;
  to.faults = o.faults;
  to.transfer_timeout_ms = static_cast<int>(o.transfer_timeout_s * 1000);
  to.ucx_transports = o.ucx_transports;
  to.platform = &runner_->platform();
  Result<std::unique_ptr<disagg::KvTransport>> transport = disagg::create_kv_transport(to);
  if (!transport.is_ok()) {
    return make_status(transport.status().code(), "--disaggregation-transfer-backend {}: {}",
                       disagg::transport_kind_name(o.transport), transport.status().message());
  }
  transport_ = std::move(transport).value();
  // The whole pool is one allocation (all layers' K, then all layers' V): one registration.
  mem::MHATokenToKVPool& pool = runner_->kv_pool();
  const std::vector<mem::KvBufferInfo> buffers = pool.get_contiguous_buf_infos();
  auto* base = static_cast<uint8_t*>(buffers.front().ptr);
  uint64_t end = 0;
  for (const mem::KvBufferInfo& b : buffers) {
    end = std::max<uint64_t>(end,
                             static_cast<uint64_t>(static_cast<uint8_t*>(b.ptr) - base) + b.bytes);
  }
  DisaggContext ctx;
  ctx.options = o;
  ctx.pool = &pool;
  KV_RETURN_IF_ERROR(init_staging(ctx));
  if (ctx.staging.base != nullptr) {
    KV_ASSIGN_OR_RETURN(ctx.region, transport_->register_region(
                                        ctx.staging.base, ctx.staging.bytes,
                                        ctx.staging.device ? pool.platform().device() : Device{}));
  } else {
    KV_ASSIGN_OR_RETURN(ctx.region,
                        transport_->register_region(base, end, pool.platform().device()));
  }
  ctx.transport = transport_.get();
  // A forward's KV writes are queued on the runner's stream (the platform's current one): a
  // transfer must not read the slots before they land.
  ctx.kv_written = [p = &runner_->platform()] { p->synchronize_stream({}); };
  const disagg::KvRegionLayout region = disagg::kv_region_layout(buffers, base);
  pd::KvLayout& l = ctx.layout;
  l.page_size = pool.config().page_size;
  l.kv_dtype = std::string(dtype_name(pool.config().dtype));
  l.num_layers = pool.config().num_layers;
  l.num_kv_heads = pool.config().num_kv_heads;
  l.head_dim = pool.config().head_dim;
  l.tp_size = 1;
  l.buffer_offsets = region.buffer_offsets;
  l.page_bytes = region.page_bytes;
  l.buffer_bytes = region.buffer_bytes;
  l.model = model_name();
  l.staging_bytes = ctx.staging.bytes;
  disagg_layout_ = l;
  if (o.mode == DisaggMode::kPrefill) {
    KV_ASSIGN_OR_RETURN(ctx.server, pd::ControlServer::bind(o.bootstrap_bind, o.bootstrap_port));
    bootstrap_port_ = ctx.server->port();
    KV_LOG_INFO(
        "disaggregation: prefill server, bootstrap (control plane) on port {}, {} transfers",
        bootstrap_port_, transport_->name());
  } else {
    ctx.id = fmt::format("decode-{}", random_rid());
    KV_LOG_INFO("disaggregation: decode server {}, {} transfers", ctx.id, transport_->name());
  }
  scheduler_->enable_disaggregation(std::move(ctx));
  return Status::ok();
}

namespace {

// The staging buffer's MiB (0: none): the flag, or the default where the backend cannot reach a
// GPU pool (UCX here reaches host memory only: a GPU pool travels through pinned host staging).
double staging_mb(const DisaggOptions& o, bool gpu_pool) {
  if (o.mode == DisaggMode::kNone) return 0;
  const bool must = o.transport == disagg::TransportKind::kUcx && gpu_pool;
  return o.staging_buffer_mb > 0 ? o.staging_buffer_mb : (must ? kDefaultStagingBufferMb : 0);
}

// Device memory for staging: a GPU pool with a backend that reaches device memory.
bool staging_on_device(const DisaggOptions& o, bool gpu_pool) {
  return gpu_pool && o.transport != disagg::TransportKind::kUcx;
}

}  // namespace

size_t Engine::device_staging_bytes(const EngineOptions& options) {
  const bool gpu = !options.runner.device.is_cpu();
  if (!staging_on_device(options.disagg, gpu)) return 0;
  return static_cast<size_t>(staging_mb(options.disagg, gpu) * 1048576.0);
}

Status Engine::init_staging(DisaggContext& ctx) {
  const DisaggOptions& o = ctx.options;
  platform::Platform& p = ctx.pool->platform();
  const bool gpu_pool = !p.device().is_cpu();
  const double mb = staging_mb(o, gpu_pool);
  if (mb <= 0) return Status::ok();
  const auto bytes = static_cast<uint64_t>(mb * 1048576.0);
  const mem::KvPoolConfig& c = ctx.pool->config();
  // The widest format a peer may stage in.
  const uint64_t token_bytes =
      disagg::StagingFormat{c.num_layers, c.num_kv_heads, c.head_dim, DType::kF32}.token_bytes();
  if (bytes < token_bytes) {
    return invalid_argument(
        "--disaggregation-staging-buffer-mb {}: smaller than one token's KV ({} bytes in f32)", mb,
        token_bytes);
  }
  ctx.staging.bytes = bytes;
  ctx.staging.device = staging_on_device(o, gpu_pool);  // the runner left it room in its pool
  if (ctx.staging.device) {
    Result<Buffer> b = p.allocate_buffer(bytes);
    if (!b.is_ok()) {
      return make_status(b.status().code(), "--disaggregation-staging-buffer-mb {}: {}", mb,
                         b.status().message());
    }
    staging_device_ = std::move(b).value();
    ctx.staging.base = staging_device_.data();
  } else {
    Result<void*> h = p.allocate_host(bytes);
    if (!h.is_ok()) {
      return make_status(h.status().code(), "--disaggregation-staging-buffer-mb {}: {}", mb,
                         h.status().message());
    }
    staging_host_ = std::unique_ptr<void, std::function<void(void*)>>(
        h.value(), [&p, bytes](void* ptr) { p.deallocate_host(ptr, bytes); });
    ctx.staging.base = h.value();
  }
  KV_LOG_INFO("disaggregation: KV moves through a {} MiB staging buffer in {} memory", mb,
              ctx.staging.device ? "device" : (gpu_pool ? "pinned host" : "host"));
  return Status::ok();
}

Engine::~Engine() {
  shutdown();
}

void Engine::shutdown() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  // Only the first caller joins; later ones (the destructor) find the thread gone.
  std::lock_guard<std::mutex> lock(shutdown_mu_);
  if (thread_.joinable()) thread_.join();
}

std::string Engine::model_name() const {
  return options_.model_path.filename().string();
}

Result<std::shared_ptr<RequestStream>> Engine::submit(SubmitRequest& request) {
  const int32_t vocab = config_.vocab_size;
  if (request.input_ids.empty()) return invalid_argument("the prompt is empty");
  for (const int32_t id : request.input_ids) {
    if (id < 0 || id >= vocab) {
      return invalid_argument("token id {} is outside the vocabulary (0..{})", id, vocab - 1);
    }
  }
  // SGLang: max_req_len = min(context_len - 1, max_total_tokens - 1). An encoder-decoder model's
  // decoder context counts the prompt and every generated token (the last one is never fed back),
  // within what the KV cache holds beside the encoder region: PrefillAdder admits a request only
  // while its encoder region, prompt and output budget stay below the pool's size (a request
  // that could never be admitted would wait forever).
  const bool enc_dec = is_encoder_decoder();
  const int64_t max_req_len =
      enc_dec ? std::min<int64_t>(context_len_, max_total_tokens_ - encoder_reserved_ - 1)
              : std::min<int64_t>(context_len_ - 1, max_total_tokens_ - 1);
  if (request.encoder_input != nullptr) {
    if (!enc_dec) return invalid_argument("an encoder input for a model without an encoder");
    if (static_cast<int64_t>(request.encoder_input->size()) != encoder_input_size_) {
      return invalid_argument("the encoder input has {} values; the encoder takes {}",
                              request.encoder_input->size(), encoder_input_size_);
    }
  }
  if (static_cast<int64_t>(request.input_ids.size()) >= max_req_len) {
    if (!options_.allow_auto_truncate) {
      return invalid_argument(
          "the input ({} tokens) is longer than the model's context length ({} tokens){}",
          request.input_ids.size(), max_req_len,
          max_req_len < context_len_ - 1 ? " as limited by the KV cache" : "");
    }
    request.input_ids.resize(max_req_len - 1);
  }
  SamplingParams& sp = request.sampling;
  sp.max_new_tokens = static_cast<int32_t>(std::min<int64_t>(
      sp.max_new_tokens, max_req_len - static_cast<int64_t>(request.input_ids.size())));
  sp.min_new_tokens = std::min(sp.min_new_tokens, sp.max_new_tokens);
  KV_RETURN_IF_ERROR(validate(sp, vocab));
  if (request.rid.empty()) request.rid = random_rid();
  if (request.disagg) {
    if (options_.disagg.mode == DisaggMode::kNone) {
      request.disagg.reset();  // a server of its own: the request is served here
    } else if (sp.max_new_tokens < 1) {
      return invalid_argument("disaggregated serving needs max_new_tokens >= 1");
    } else if (options_.disagg.mode == DisaggMode::kDecode &&
               (request.disagg->bootstrap_host.empty() || request.disagg->bootstrap_port <= 0 ||
                request.disagg->bootstrap_port > 65535)) {
      return invalid_argument(
          "a decode server needs bootstrap_host and bootstrap_port (1..65535) with "
          "bootstrap_room");
    }
  }

  auto req = std::make_unique<Req>();
  req->id = next_id_++;
  req->rid = request.rid;
  req->origin_input_ids = request.input_ids;
  req->sampling = sp;
  req->seed = sp.seed.value_or(thread_rng()());
  req->stop_strings = request.stop;
  req->logprob_start_len = sp.return_logprob && request.logprob_start_len >= 0
                               ? std::min<int32_t>(request.logprob_start_len, req->input_len() - 1)
                               : -1;
  req->logit_rules = request.logit_rules != nullptr ? request.logit_rules : model_logit_rules_;
  if (request.encoder_input != nullptr) {
    req->encoder_input = request.encoder_input;
    req->encoder_len = encoder_len_;
  }
  req->disagg = request.disagg;
  req->arrival = Clock::now();
  req->stream = std::make_shared<RequestStream>();
  auto stream = req->stream;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_) return unavailable("the engine is shutting down");
    inbox_.push_back({Command::kSubmit, std::move(req), "", nullptr});
  }
  cv_.notify_one();
  return stream;
}

void Engine::abort(const std::string& rid) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    inbox_.push_back({Command::kAbort, nullptr, rid, nullptr});
  }
  cv_.notify_one();
}

Status Engine::flush_cache() {
  auto done = std::make_shared<std::promise<Status>>();
  auto result = done->get_future();
  {
    std::lock_guard<std::mutex> lock(mu_);
    inbox_.push_back({Command::kFlush, nullptr, "", done});
  }
  cv_.notify_one();
  return result.get();
}

EngineStatus Engine::status() const {
  std::lock_guard<std::mutex> lock(mu_);
  EngineStatus s = status_;
  s.metrics = metrics_.snapshot();
  return s;
}

std::string Engine::prometheus_metrics() const {
  std::string out = metrics_.render_prometheus(model_name());
  // Where the engine thread's time goes: step - forward - sample is the scheduler's overhead.
  const SchedulerStats s = status().scheduler;
  const std::string labels = fmt::format("model_name=\"{}\"", model_name());
  for (const auto& [name, help, value] : {
           std::tuple{"engine_step_seconds_total", "Engine thread time in scheduler steps",
                      s.step_seconds},
           std::tuple{"forward_seconds_total", "Time in the model forward", s.forward_seconds},
           std::tuple{"sample_seconds_total", "Time sampling tokens", s.sample_seconds},
       }) {
    out += fmt::format("# HELP kvserve:{} {}.\n# TYPE kvserve:{} counter\nkvserve:{}{{{}}} {}\n",
                       name, help, name, name, labels, value);
  }
  if (options_.disagg.mode == DisaggMode::kNone) return out;
  // Disaggregation: KV hand-offs and the transfers behind them (the prefill side writes).
  const DisaggStats d = status().disagg;
  for (const auto& [name, type, help, value] : {
           std::tuple{"disagg_requests_succeeded_total", "counter", "KV hand-offs that succeeded",
                      double(d.succeeded)},
           std::tuple{"disagg_requests_failed_total", "counter",
                      "KV hand-offs that failed (timeouts, aborts, transfer failures, dead peers)",
                      double(d.failed)},
           std::tuple{"disagg_timeouts_total", "counter", "KV hand-offs that timed out",
                      double(d.timeouts)},
           std::tuple{"disagg_transfers_total", "counter", "KV write batches done",
                      double(d.transfers)},
           std::tuple{"disagg_transfer_failures_total", "counter", "KV write batches failed",
                      double(d.transfer_failures)},
           std::tuple{"disagg_transfer_bytes_total", "counter", "KV bytes written",
                      double(d.transfer_bytes)},
           std::tuple{"disagg_transfer_seconds_total", "counter",
                      "Time from post to done of the KV write batches", d.transfer_seconds},
           std::tuple{"disagg_transfer_max_seconds", "gauge", "Longest KV write batch",
                      d.transfer_max_seconds},
           std::tuple{"disagg_transfer_device_bytes_total", "counter",
                      "KV bytes of the write batches the device timed (cuda-ipc)",
                      double(d.transfer_device_bytes)},
           std::tuple{"disagg_transfer_device_seconds_total", "counter",
                      "The device's own time on those batches", d.transfer_device_seconds},
           std::tuple{"disagg_handoff_seconds_total", "counter",
                      "Hand-offs' time from start to success, summed", d.handoff_seconds},
           std::tuple{"disagg_bootstrap_seconds_total", "counter",
                      "Prefill: time until the request and its destination pages were both here; "
                      "decode: until its pages were allocated and their ids sent",
                      d.bootstrap_seconds},
           std::tuple{"disagg_wait_seconds_total", "counter",
                      "Decode: time from then until the prefill's done arrived", d.wait_seconds},
           std::tuple{"disagg_forward_seconds_total", "counter",
                      "Prefill: time from then until every chunk was posted (queue + forward)",
                      d.forward_seconds},
           std::tuple{"disagg_last_transfer_seconds_total", "counter",
                      "Prefill: time from then until the last write was done",
                      d.last_transfer_seconds},
           std::tuple{"disagg_inflight_requests", "gauge",
                      "Requests in a KV hand-off (bootstrapping, waiting, transferring, draining)",
                      double(d.bootstrapping + d.waiting_for_input + d.transferring + d.draining)},
       }) {
    out += fmt::format("# HELP kvserve:{} {}.\n# TYPE kvserve:{} {}\nkvserve:{}{{{}}} {}\n", name,
                       help, name, type, name, labels, value);
  }
  return out;
}

void Engine::publish_status(bool& checked_since_work) {
  EngineStatus snapshot;
  bool violation = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    snapshot = status_;
  }
  snapshot.scheduler = scheduler_->stats();
  snapshot.disagg = scheduler_->disagg_stats();
  // Idle right after the last step (or at startup): check the memory invariants once.
  if (scheduler_->idle() && options_.check_invariants_when_idle && !checked_since_work) {
    checked_since_work = true;
    ++snapshot.invariant_checks;
    if (Status s = scheduler_->check_idle_invariants(); !s.is_ok()) {
      ++snapshot.invariant_violations;
      snapshot.last_violation = s.message();
      violation = true;
    }
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    snapshot.metrics = status_.metrics;
    status_ = snapshot;
  }
  if (violation) KV_LOG_ERROR("MEMORY INVARIANT VIOLATED: {}", snapshot.last_violation);
}

void Engine::loop() {
  pthread_setname_np(pthread_self(), "kvserve-engine");  // for top -H, perf and gdb
  bool checked_since_work = false;
  while (true) {
    std::deque<Command> commands;
    {
      std::unique_lock<std::mutex> lock(mu_);
      if (scheduler_->idle()) {
        if (scheduler_->needs_polling()) {
          // Control messages and heartbeats arrive while nothing runs.
          cv_.wait_for(lock, kDisaggPollInterval, [&] { return stopping_ || !inbox_.empty(); });
        } else {
          cv_.wait(lock, [&] { return stopping_ || !inbox_.empty(); });
        }
      }
      if (stopping_) break;
      commands.swap(inbox_);
    }
    for (Command& c : commands) {
      switch (c.kind) {
        case Command::kSubmit:
          scheduler_->add_request(std::move(c.req));
          break;
        case Command::kAbort:
          scheduler_->abort(c.rid, "aborted by the client");
          break;
        case Command::kFlush:
          if (scheduler_->idle()) {
            scheduler_->cache().reset();
            c.done->set_value(Status::ok());
          } else {
            c.done->set_value(unavailable("cannot flush the cache while requests are running"));
          }
          break;
      }
    }
    const bool worked = scheduler_->step();
    dispatcher_->submit(scheduler_->take_outputs());  // one hand-off per step
    if (worked) checked_since_work = false;
    // A step that did nothing changed nothing the status shows: no snapshot (a disaggregated
    // engine waiting on the other side loops every kDisaggBusyPollInterval).
    const bool check_due = scheduler_->idle() && !checked_since_work;
    if (worked || !commands.empty() || check_due) publish_status(checked_since_work);
    if (!worked && !scheduler_->idle()) {
      // Waiting requests that cannot run yet and nothing running: wait for news briefly.
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait_for(lock,
                   scheduler_->needs_polling()
                       ? std::chrono::microseconds(kDisaggBusyPollInterval)
                       : std::chrono::microseconds(std::chrono::milliseconds(5)),
                   [&] { return stopping_ || !inbox_.empty(); });
    }
  }
  // Shutting down: end every stream.
  for (Command& c : inbox_) {
    if (c.kind == Command::kSubmit) {
      StreamEvent e;
      e.finished = true;
      e.finish = {FinishKind::kAbort, -1, "", "server shutting down"};
      c.req->stream->push(std::move(e));
    }
    if (c.kind == Command::kFlush) c.done->set_value(unavailable("server shutting down"));
  }
  scheduler_->abort_all("server shutting down");
  dispatcher_->submit(scheduler_->take_outputs());
  dispatcher_.reset();  // delivers the final events, then stops
}

}  // namespace kvserve::engine
