#include "kvserve/model/model_runner.h"

#include <algorithm>
#include <chrono>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>

#include "kvserve/core/logging.h"
#include "kvserve/core/progress.h"

#include <fmt/format.h>

#include "kvserve/checkpoint/weights.h"
#include "kvserve/mem/common.h"
#include "kvserve/platform/kernel_switches_env.h"
#include "kvserve/platform/ops/sampling.h"

namespace kvserve::model {
namespace {

constexpr double kCpuDefaultMemFraction = 0.25;
constexpr size_t kCpuDefaultKvCap = size_t{4} << 30;
constexpr int32_t kCpuDefaultMaxRunning = 64;
// On a GPU the KV cache takes this share of the device pool left after the weights; the rest of
// the pool holds activations, workspaces and graph buffers (CUDA's own allocations and the
// cuBLASLt workspace live in the headroom outside the pool: platform/device_pool.h).
constexpr double kGpuDefaultMemFraction = 0.85;
constexpr int32_t kGpuDefaultMaxRunning = 256;
// Extra req_to_token columns beyond the context (SGLang: +4 for speculative slack).
constexpr int32_t kContextSlack = 4;

std::string mib(size_t bytes) {
  return fmt::format("{:.1f} MiB", bytes / (1024.0 * 1024.0));
}

// The default number of request rows, and the KV slots a memory fraction buys (capped at
// `cap_tokens`, what every row filled can use); `tokens` as given when positive.
int32_t default_rows(const ModelRunnerOptions& o, bool on_cpu) {
  return o.max_running_requests > 0 ? o.max_running_requests
         : on_cpu                   ? kCpuDefaultMaxRunning
                                    : kGpuDefaultMaxRunning;
}

int64_t kv_tokens(platform::Platform& platform, const ModelRunnerOptions& o,
                  const mem::KvPoolConfig& pool, int64_t cap_tokens) {
  if (o.max_total_tokens > 0) return o.max_total_tokens;
  const bool on_cpu = platform.device().is_cpu();
  const double fraction = o.mem_fraction_static > 0 ? o.mem_fraction_static
                          : on_cpu                  ? kCpuDefaultMemFraction
                                                    : kGpuDefaultMemFraction;
  size_t free = platform.memory_info().free_bytes;
  if (!on_cpu) free -= std::min(free, o.reserved_device_bytes);
  size_t budget = static_cast<size_t>(static_cast<double>(free) * fraction);
  if (o.mem_fraction_static == 0 && on_cpu) budget = std::min(budget, kCpuDefaultKvCap);
  return std::min<int64_t>(static_cast<int64_t>(budget / pool.bytes_per_token()), cap_tokens);
}

// What the scheduler and the engine read of a Whisper checkpoint, as a ModelConfig: the decoder's
// shape, vocabulary and eos ids (generation_config.json's first).
checkpoint::ModelConfig describe_whisper(const checkpoint::WhisperConfig& c,
                                         const checkpoint::WhisperGenerationConfig& g) {
  checkpoint::ModelConfig m;
  m.architecture_name = "WhisperForConditionalGeneration";
  m.model_type = "whisper";
  m.vocab_size = c.vocab_size;
  m.hidden_size = c.d_model;
  m.num_hidden_layers = c.decoder_layers;
  m.layer_window_left.assign(c.decoder_layers, -1);
  m.num_attention_heads = c.decoder_attention_heads;
  m.num_key_value_heads = c.decoder_attention_heads;
  m.head_dim = c.decoder_head_dim();
  m.max_position_embeddings = c.max_target_positions;
  m.tie_word_embeddings = true;
  m.hidden_act = "gelu";
  m.eos_token_ids = g.eos_token_ids.empty() ? c.eos_token_ids : g.eos_token_ids;
  return m;
}

// The context length served: --context-length, else max_position_embeddings scaled as SGLang's
// get_context_length scales it for rope_scaling (checkpoint::default_context_length).
int64_t served_context_length(const checkpoint::ModelConfig& config, const ModelRunnerOptions& o) {
  return o.context_length > 0 ? o.context_length : checkpoint::default_context_length(config);
}

}  // namespace

bool is_whisper_checkpoint(const std::filesystem::path& dir) {
  std::ifstream in(dir / "config.json");
  if (!in) return false;
  std::stringstream text;
  text << in.rdbuf();
  const nlohmann::json j = nlohmann::json::parse(text.str(), nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return false;
  const auto it = j.find("model_type");
  return it != j.end() && it->is_string() && it->get<std::string>() == "whisper";
}

ModelRunner::~ModelRunner() {
  graphs_.reset();
  if (stream_ != nullptr) {
    stream_->synchronize();
    platform_->set_current_stream({});  // the stream goes before the platform
  }
}

Result<std::unique_ptr<ModelRunner>> ModelRunner::create(const std::filesystem::path& model_dir,
                                                         const ModelRunnerOptions& o) {
  if (o.page_size < 1 || o.page_size > 128) {
    return invalid_argument("--page-size must be in 1..128, got {}", o.page_size);
  }
  if (o.mem_fraction_static < 0 || o.mem_fraction_static >= 1) {
    return invalid_argument("--mem-fraction-static must be in (0, 1), got {}",
                            o.mem_fraction_static);
  }
  if (o.cuda_graph_max_bs < 0) {
    return invalid_argument("--cuda-graph-max-bs must be >= 1, got {}", o.cuda_graph_max_bs);
  }
  if (o.tp_size < 1) return invalid_argument("--tp-size must be >= 1, got {}", o.tp_size);
  if (o.device_pool.utilization != 0 && o.device.is_cpu()) {
    return invalid_argument(
        "--gpu-memory-utilization {} applies to CUDA devices; on the CPU --mem-fraction-static or "
        "--max-total-tokens sizes the KV cache",
        o.device_pool.utilization);
  }
  if (o.base_gpu_id >= 0 && !o.device.is_cpu() && o.device.index != o.base_gpu_id) {
    ModelRunnerOptions based = o;
    based.device.index = o.base_gpu_id;
    return create(model_dir, based);
  }
  if ((o.tp_size > 1 || o.tp_group_of_one) && o.tp.comm == nullptr) {
    return create_tp_leader(model_dir, o);
  }
  std::unique_ptr<ModelRunner> r(new ModelRunner());
  r->page_size_ = o.page_size;
  const Device device = o.device;
  // The model and the options against the backend's capabilities first: nothing is loaded yet.
  const bool whisper = is_whisper_checkpoint(model_dir);
  checkpoint::ModelConfig config;
  std::optional<checkpoint::WhisperConfig> whisper_config;
  attention::AttentionRequirements need;
  attention::AttentionBackendKind backend_kind =
      o.attention_backend.value_or(attention::default_attention_backend(device.kind));
  if (whisper && o.tp.size() > 1) {
    return Status(StatusCode::kUnimplemented,
                  fmt::format("--tp-size {}: tensor parallelism is not implemented for Whisper "
                              "checkpoints (model_type whisper); use --tp-size 1",
                              o.tp.size()));
  }
  if (whisper) {
    KV_ASSIGN_OR_RETURN(whisper_config, checkpoint::load_whisper_config(model_dir));
    // The ragged layout with pages over 1 starts the decoder region inside a page: the CUDA
    // default is then cuda-ragged (cuda-paged reads whole pages; the check below refuses it).
    if (!o.attention_backend && !device.is_cpu() &&
        o.encoder_kv_layout == mem::EncoderKvLayout::kRagged && o.page_size > 1) {
      backend_kind = attention::AttentionBackendKind::kCudaRagged;
    }
    need = whisper_attention_requirements(*whisper_config, o);
    if (o.kv_cache_dtype.has_value()) {
      return invalid_argument(
          "--kv-cache-dtype {}: a Whisper checkpoint keeps its KV cache in the compute dtype "
          "(auto)",
          dtype_name(*o.kv_cache_dtype));
    }
  } else {
    KV_ASSIGN_OR_RETURN(config, checkpoint::load_model_config(model_dir));
    // Windows that cover the whole served context mask nothing: full attention from here on.
    config.layer_window_left =
        checkpoint::served_window_left(config, served_context_length(config, o));
    // With tensor parallelism the attention sees this rank's heads (refused here, before any
    // weight, when the group does not divide them).
    KV_ASSIGN_OR_RETURN(const TpShard shard, make_tp_shard(config, o.tp.rank(), o.tp.size()));
    need = attention_requirements(shard_config(config, shard), o);
  }
  KV_RETURN_IF_ERROR(attention::check_attention_support(backend_kind, need));
  KV_ASSIGN_OR_RETURN(r->platform_, platform::create_platform(device));
  r->platform_->set_allocation_faults(o.allocation_faults);
  r->platform_->set_kernel_switches(o.kernel_switches);
  if (!device.is_cpu()) {
    KV_LOG_INFO("CUDA kernel switches: {}", platform::describe(o.kernel_switches));
  }
  // Before anything is allocated: weights, KV cache and activations all come from the pool.
  KV_RETURN_IF_ERROR(platform::reserve_device_pool(*r->platform_, o.device_pool));
  if (!device.is_cpu()) {
    r->stream_ = std::make_unique<platform::Stream>(*r->platform_);
    r->platform_->set_current_stream(r->stream_->handle());
  }
  if (whisper) {
    KV_RETURN_IF_ERROR(r->load_whisper(model_dir, *whisper_config, backend_kind, o));
    return r;
  }
  r->config_ = config;
  const int64_t max_context = served_context_length(config, o);
  r->context_len_ = static_cast<int32_t>(std::min<int64_t>(max_context, INT32_MAX - kContextSlack));
  KV_ASSIGN_OR_RETURN(auto weights, checkpoint::WeightStore::open(model_dir));
  {
    std::optional<ProgressBar> bar;
    std::function<void(int64_t, int64_t)> on_layer;
    if (o.show_progress) {
      on_layer = [&](int64_t done, int64_t total) {
        if (!bar) bar.emplace("Loading weights", total, "layers");
        bar->update(done);
      };
    }
    KV_ASSIGN_OR_RETURN(r->model_,
                        CausalLM::load(config, *weights, *r->platform_,
                                       int64_t{r->context_len_} + kContextSlack, on_layer, o.tp));
  }

  KV_ASSIGN_OR_RETURN(r->backend_,
                      attention::create_attention_backend(backend_kind, *r->platform_));

  const bool on_cpu = device.is_cpu();
  KV_CHECK(r->model_->dtype() == CausalLM::compute_dtype(device.kind), "the compute dtype rule");
  const DType kv_dtype = need.kv_dtype;  // checked against the backend's KV dtypes above

  mem::KvPoolConfig pool{.num_layers = config.num_hidden_layers,
                         .num_kv_heads = r->model_->shard().kv_heads,
                         .head_dim = config.head_dim,
                         .size = 0,
                         .page_size = o.page_size,
                         .dtype = kv_dtype};
  const int32_t rows = default_rows(o, on_cpu);
  // More slots than every row filled to the context can never be used.
  int64_t tokens =
      kv_tokens(*r->platform_, o, pool, int64_t{rows} * (r->context_len_ + kContextSlack));
  if (o.tp.comm != nullptr) {
    // Slot indices are the scheduler's (rank 0's) and mean the same slot on every rank: every
    // rank's pool takes the smallest count any rank can hold.
    dist::Communicator* host = o.tp.host_comm();
    std::vector<int64_t> all(static_cast<size_t>(o.tp.size()));
    KV_RETURN_IF_ERROR(host->all_gather(&tokens, all.data(), sizeof(int64_t), {}));
    tokens = *std::ranges::min_element(all);
  }
  tokens = mem::floor_align(tokens, o.page_size);
  if (tokens < o.page_size) {
    return out_of_memory("no room for a KV cache: {} tokens ({} per token)", tokens,
                         mib(pool.bytes_per_token()));
  }
  pool.size = tokens;
  KV_ASSIGN_OR_RETURN(r->kv_pool_, mem::MHATokenToKVPool::create(*r->platform_, pool));
  r->max_running_ = rows;
  r->row_len_ = r->context_len_ + kContextSlack;
  if (!on_cpu) {
    // The device attention backends read rows through this mirror (device_req_to_token.h) of
    // the scheduler's table (its rows, padding row 0 included).
    KV_ASSIGN_OR_RETURN(
        r->req_to_token_device_,
        mem::DeviceReqToToken::create(*r->platform_, r->max_running_ + 1, r->row_len_));
  }

  if (!on_cpu && !o.disable_cuda_graph) {
    if (r->model_->rope_depends_on_length()) {
      // A decode step's frequencies follow each request's length (docs/rope-scaling.md).
      KV_LOG_INFO("rope_scaling {} follows the sequence length: decode runs eagerly",
                  config.rope_scaling.rope_type);
    } else if (!r->backend_->supports_decode_graphs()) {
      KV_LOG_INFO("attention backend {} has no decode graphs: decode runs eagerly",
                  r->backend_->name());
    } else {
      const int32_t max_bs = o.cuda_graph_max_bs > 0 ? o.cuda_graph_max_bs : kDefaultCudaGraphMaxBs;
      auto graphs =
          DecodeGraphRunner::create(*r->platform_, r->stream_->handle(), *r->model_, *r->backend_,
                                    r->req_to_token_device_.get(), *r->kv_pool_, max_bs);
      if (!graphs.is_ok()) {
        return make_status(graphs.status().code(), "{} (--disable-cuda-graph runs without graphs)",
                           graphs.status().message());
      }
      r->graphs_ = std::move(graphs).value();
      KV_LOG_INFO("{}", r->graphs_->summary());
    }
  }
  return r;
}

Result<std::unique_ptr<ModelRunner>> ModelRunner::create_tp_leader(
    const std::filesystem::path& model_dir, const ModelRunnerOptions& o) {
  // Everything that can be refused is refused before a process is launched.
  if (is_whisper_checkpoint(model_dir)) {
    return Status(StatusCode::kUnimplemented,
                  fmt::format("--tp-size {}: tensor parallelism is not implemented for Whisper "
                              "checkpoints (model_type whisper); use --tp-size 1",
                              o.tp_size));
  }
  KV_ASSIGN_OR_RETURN(const checkpoint::ModelConfig config,
                      checkpoint::load_model_config(model_dir));
  KV_RETURN_IF_ERROR(make_tp_shard(config, 0, o.tp_size).status());
  if (!o.device.is_cpu()) {
    int32_t devices = 0;
    for (const platform::PlatformInfo& p : platform::list_platforms())
      devices += p.device.kind == DeviceKind::kCuda ? 1 : 0;
    if (o.device.index + o.tp_size > devices) {
      return invalid_argument(
          "--tp-size {} from GPU {} (--base-gpu-id) needs GPUs {}..{}; this machine has {} "
          "CUDA device(s)",
          o.tp_size, o.device.index, o.device.index, o.device.index + o.tp_size - 1, devices);
    }
  }
  KV_ASSIGN_OR_RETURN(std::unique_ptr<TpGroup> group, TpGroup::launch(model_dir, o));
  ModelRunnerOptions mine = o;
  mine.tp = group->tp();
  auto r = create(model_dir, mine);
  if (!r.is_ok()) {
    group->fail(r.status().message());
    return r.status();
  }
  if (Status s = group->ready(); !s.is_ok()) {
    group->fail(s.message());
    return s;
  }
  (*r)->tp_group_ = std::move(group);
  (*r)->on_tp_failure_ = o.on_tp_failure;
  if ((*r)->tp_group_->device_collectives()) {
    // A dead worker would leave rank 0 waiting on its stream forever: the platform's waits poll
    // and the group's watch aborts NCCL (the group outlives the platform: first member).
    TpGroup* g = (*r)->tp_group_.get();
    (*r)->platform_->set_wait_watch([g] { g->watch(); });
  }
  return r;
}

Status ModelRunner::announce(const mem::ForwardBatch& batch) {
  if (tp_group_ == nullptr) return Status::ok();
  if (tp_group_->failed()) {
    // A failure the wait watch found outside a forward is reported here, once.
    Status s = after_forward(Status::ok());
    return s.is_ok() ? unavailable("the tensor-parallel group has failed; no forward can run") : s;
  }
  return after_forward(tp_group_->announce_forward(batch));
}

Status ModelRunner::after_forward(Status s) {
  if (tp_group_ == nullptr || tp_failure_reported_) return s;
  if (tp_group_->failed()) {
    // The wait watch failed the group during this forward (a worker died; NCCL was aborted, so
    // the forward's outputs are not the model's): the forward fails too.
    if (s.is_ok()) s = tp_group_->failure();
  } else if (s.is_ok()) {
    return s;
  } else {
    KV_LOG_ERROR("tensor parallel: {}; the group stops", s.message());
    tp_group_->fail(s.message());
  }
  tp_failure_reported_ = true;
  if (on_tp_failure_) on_tp_failure_(s);
  return s;
}

attention::AttentionRequirements ModelRunner::attention_requirements(
    const checkpoint::ModelConfig& config, const ModelRunnerOptions& o) {
  attention::AttentionRequirements need;
  need.num_q_heads = config.num_attention_heads;
  need.num_kv_heads = config.num_key_value_heads;
  need.head_dim = config.head_dim;
  need.rope_type = config.rope_scaling.rope_type;
  if (config.attn_logit_softcapping) need.logit_softcap_field = "attn_logit_softcapping";
  need.page_size = o.page_size;
  // auto: the compute dtype (CUDA's kernels read bf16 or fp8, widened with the layer's scales:
  // docs/fp8-kv-cache.md).
  need.kv_dtype = o.kv_cache_dtype.value_or(CausalLM::compute_dtype(o.device.kind));
  need.device = o.device.kind;
  // Only a window smaller than the served context needs the backend's windows.
  const int64_t context = served_context_length(config, o);
  const std::vector<int32_t> windows = checkpoint::served_window_left(config, context);
  if (const auto w = std::ranges::max_element(windows); w != windows.end() && *w >= 0) {
    need.sliding_window_field =
        fmt::format("sliding_window {} (smaller than the context length {})", *w + 1, context);
  }
  return need;
}

attention::AttentionRequirements ModelRunner::whisper_attention_requirements(
    const checkpoint::WhisperConfig& config, const ModelRunnerOptions& o) {
  attention::AttentionRequirements need;
  need.head_dim_field = "d_model / decoder_attention_heads";
  need.heads_field = "decoder_attention_heads";
  need.kv_heads_field = "decoder_attention_heads";
  need.num_q_heads = config.decoder_attention_heads;
  need.num_kv_heads = config.decoder_attention_heads;
  need.head_dim = config.decoder_head_dim();
  need.cross_attention = true;
  need.ragged_encoder_rows = o.encoder_kv_layout == mem::EncoderKvLayout::kRagged;
  need.page_size = o.page_size;
  need.kv_dtype = o.device.is_cpu() ? DType::kF32 : DType::kBF16;  // the compute dtype
  need.device = o.device.kind;
  return need;
}

Status ModelRunner::load_whisper(const std::filesystem::path& dir,
                                 const checkpoint::WhisperConfig& c,
                                 attention::AttentionBackendKind backend_kind,
                                 const ModelRunnerOptions& o) {
  const bool on_cpu = platform_->device().is_cpu();
  encoder_kv_layout_ = o.encoder_kv_layout;
  KV_ASSIGN_OR_RETURN(whisper_generation_, checkpoint::load_whisper_generation_config(dir));
  KV_ASSIGN_OR_RETURN(auto weights, checkpoint::WeightStore::open(dir));
  KV_ASSIGN_OR_RETURN(whisper_, WhisperModel::load(c, *weights, *platform_));
  KV_ASSIGN_OR_RETURN(backend_, attention::create_attention_backend(backend_kind, *platform_));
  config_ = describe_whisper(c, whisper_generation_);
  // The decoder's limit counts the prompt and every generated token (transformers' max_length).
  context_len_ = std::min(whisper_generation_.max_length.value_or(c.max_target_positions),
                          c.max_target_positions);

  // A full row: the encoder region (page-aligned in the aligned layout) and every decoder
  // position; whole pages, since the allocator hands out pages.
  const int64_t row_len = encoder_reserved_len(c.max_source_positions) + c.max_target_positions;
  const mem::KvPoolConfig pool{.num_layers = c.decoder_layers,
                               .num_kv_heads = c.decoder_attention_heads,
                               .head_dim = c.decoder_head_dim(),
                               .size = 0,
                               .page_size = o.page_size,
                               .dtype = whisper_->dtype()};
  const int32_t rows = default_rows(o, on_cpu);
  // One slot more per row, in whole pages: the scheduler admits a request while its row and
  // output budget stay below the free slots, so rows x full rows alone would never admit the last.
  int64_t tokens =
      kv_tokens(*platform_, o, pool, int64_t{rows} * mem::ceil_align(row_len + 1, o.page_size));
  tokens = mem::floor_align(tokens, o.page_size);
  if (tokens < o.page_size) {
    return out_of_memory("no room for a KV cache: {} tokens ({} per token)", tokens,
                         mib(pool.bytes_per_token()));
  }
  mem::KvPoolConfig sized = pool;
  sized.size = tokens;
  KV_ASSIGN_OR_RETURN(kv_pool_, mem::MHATokenToKVPool::create(*platform_, sized));
  // The scheduler's table (kv_shape): rows of the encoder region and every decoder position.
  max_running_ = rows;
  row_len_ = static_cast<int32_t>(row_len) + kContextSlack;
  if (!on_cpu) {
    // The device attention backends read rows, encoder region included, through this mirror.
    KV_ASSIGN_OR_RETURN(req_to_token_device_,
                        mem::DeviceReqToToken::create(*platform_, max_running_ + 1, row_len_));
  }
  return Status::ok();
}

WhisperModel& ModelRunner::whisper_model() {
  KV_CHECK(whisper_ != nullptr, "not an encoder-decoder model");
  return *whisper_;
}

const checkpoint::WhisperConfig& ModelRunner::whisper_config() const {
  KV_CHECK(whisper_ != nullptr, "not an encoder-decoder model");
  return whisper_->config();
}

const checkpoint::WhisperGenerationConfig& ModelRunner::whisper_generation_config() const {
  KV_CHECK(whisper_ != nullptr, "not an encoder-decoder model");
  return whisper_generation_;
}

int32_t ModelRunner::encoder_len() const {
  return whisper_config().max_source_positions;
}

int32_t ModelRunner::encoder_reserved_len(int32_t encoder_len) const {
  return mem::encoder_reserved_len(encoder_len, page_size_, encoder_kv_layout_);
}

int64_t ModelRunner::encoder_input_size() const {
  const checkpoint::WhisperConfig& c = whisper_config();
  return int64_t{c.num_mel_bins} * c.input_frames();
}

Result<const void*> ModelRunner::encode_inputs(const mem::ForwardBatch& batch) {
  const std::span<const std::span<const float>> inputs = batch.encoder_inputs;
  if (inputs.empty()) return static_cast<const void*>(nullptr);
  const checkpoint::WhisperConfig& c = whisper_->config();
  const auto n = static_cast<int64_t>(inputs.size());
  KV_CHECK_EQ(static_cast<int64_t>(batch.encoder_out_cache_loc.size()), n * c.max_source_positions,
              "encoder inputs and encoder slots disagree");
  const int64_t rows = n * c.max_source_positions;
  if (encoder_hidden_.empty() || encoder_hidden_.dim(0) < rows) {
    encoder_hidden_ = Tensor();
    KV_ASSIGN_OR_RETURN(encoder_hidden_, platform_->empty(whisper_->dtype(), {rows, c.d_model}));
  }
  const size_t bytes =
      static_cast<size_t>(c.max_source_positions) * c.d_model * dtype_size(whisper_->dtype());
  auto* out = encoder_hidden_.data_as<uint8_t>();
  std::chrono::steady_clock::time_point start;
  if (encoder_timing_) {
    platform_->synchronize();
    start = std::chrono::steady_clock::now();
  }
  for (int64_t i = 0; i < n; ++i) {
    KV_RETURN_IF_ERROR(whisper_->encode(inputs[i], out + i * bytes));
  }
  if (encoder_timing_) {
    platform_->synchronize();
    last_encoder_seconds_ =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  }
  return static_cast<const void*>(encoder_hidden_.data());
}

void ModelRunner::bind(mem::ForwardBatch& batch) {
  KV_CHECK(batch.req_to_token != nullptr, "a batch from make_forward_batch");
  KV_CHECK(req_to_token_device_ == nullptr || req_to_token_device_->mirrors(*batch.req_to_token),
           "a batch of a req_to_token table of another shape than kv_shape()");
  KV_CHECK((batch.kv_pool == nullptr || batch.kv_pool == kv_pool_.get()) &&
               (batch.req_to_token_device == nullptr ||
                batch.req_to_token_device == req_to_token_device_.get()),
           "a batch bound to another runner's buffers");
  batch.kv_pool = kv_pool_.get();
  batch.req_to_token_device = req_to_token_device_.get();
}

Status ModelRunner::prepare(mem::ForwardBatch& batch) {
  return backend_->init_forward_metadata(batch);
}

bool ModelRunner::use_graph(mem::ForwardBatch& batch) {
  bind(batch);
  return graphs_ != nullptr && graphs_enabled_ && graphs_->can_run(batch);
}

Status ModelRunner::forward(mem::ForwardBatch& batch, std::vector<float>& logits) {
  KV_RETURN_IF_ERROR(announce(batch));
  return after_forward(forward_local(batch, logits));
}

Status ModelRunner::forward_local(mem::ForwardBatch& batch, std::vector<float>& logits) {
  if (whisper_ != nullptr) {
    bind(batch);
    KV_RETURN_IF_ERROR(prepare(batch));
    KV_ASSIGN_OR_RETURN(const void* hidden, encode_inputs(batch));
    return whisper_->forward(batch, *backend_, logits, hidden);
  }
  if (use_graph(batch)) return graphs_->replay(batch, &logits, nullptr);
  KV_RETURN_IF_ERROR(prepare(batch));
  return model_->forward(batch, *backend_, logits);
}

Status ModelRunner::forward(mem::ForwardBatch& batch, std::vector<float>& logits,
                            std::span<const std::span<const float>> encoder_inputs) {
  batch.encoder_inputs.assign(encoder_inputs.begin(), encoder_inputs.end());
  return forward(batch, logits);
}

Status ModelRunner::forward_encoded(mem::ForwardBatch& batch, std::vector<float>& logits,
                                    const void* encoder_hidden) {
  KV_CHECK(whisper_ != nullptr, "not an encoder-decoder model");
  bind(batch);
  KV_RETURN_IF_ERROR(prepare(batch));
  return whisper_->forward(batch, *backend_, logits, encoder_hidden);
}

Status ModelRunner::forward_greedy(mem::ForwardBatch& batch, std::vector<int32_t>& tokens) {
  if (whisper_ != nullptr) {  // Whisper's logits come to the host: the argmax is taken there
    KV_RETURN_IF_ERROR(forward(batch, host_logits_));
    const int64_t vocab = config_.vocab_size;
    tokens.resize(batch.logits_indices.size());
    for (size_t i = 0; i < tokens.size(); ++i) {
      const float* row = host_logits_.data() + static_cast<int64_t>(i) * vocab;
      tokens[i] = static_cast<int32_t>(std::max_element(row, row + vocab) - row);
    }
    return Status::ok();
  }
  KV_RETURN_IF_ERROR(announce(batch));
  if (use_graph(batch)) return after_forward(graphs_->replay(batch, nullptr, &tokens));
  KV_RETURN_IF_ERROR(after_forward(prepare(batch)));
  return after_forward(model_->forward_greedy(batch, *backend_, tokens));
}

Status ModelRunner::reserve_sampling_buffers(int64_t rows, const SamplingInputs& sampling,
                                             bool logprobs) {
  // Grown geometrically (twice what is asked), never shrunk; contents are not kept.
  auto grow = [&](Buffer& buf, size_t bytes, const char* what) -> Status {
    if (buf.bytes() >= bytes) return Status::ok();
    buf = Buffer();
    auto b = platform_->allocate_buffer(std::max<size_t>(bytes * 2, 4096));
    if (!b.is_ok()) {
      return make_status(b.status().code(), "sampling {} buffer of {} bytes: {}", what, bytes,
                         b.status().message());
    }
    buf = std::move(b).value();
    return Status::ok();
  };
  KV_RETURN_IF_ERROR(grow(sampling_.params, sampling.rows.size_bytes(), "parameters"));
  if (!sampling.penalty_offsets.empty()) {
    KV_RETURN_IF_ERROR(grow(sampling_.offsets, sampling.penalty_offsets.size_bytes(), "penalty"));
    KV_RETURN_IF_ERROR(grow(sampling_.entries,
                            std::max<size_t>(1, sampling.penalty_entries.size_bytes()), "penalty"));
  }
  KV_RETURN_IF_ERROR(grow(sampling_.tokens, static_cast<size_t>(rows) * sizeof(int32_t), "token"));
  if (logprobs) {
    KV_RETURN_IF_ERROR(
        grow(sampling_.logprobs, static_cast<size_t>(rows) * sizeof(float), "logprob"));
  }
  return Status::ok();
}

Status ModelRunner::forward_sample(mem::ForwardBatch& batch, const SamplingInputs& sampling,
                                   std::vector<int32_t>& tokens, std::vector<float>* logprobs,
                                   std::vector<float>* raw_logits) {
  KV_RETURN_IF_ERROR(announce(batch));
  return after_forward(sample_local(batch, sampling, tokens, logprobs, raw_logits));
}

Status ModelRunner::sample_local(mem::ForwardBatch& batch, const SamplingInputs& sampling,
                                 std::vector<int32_t>& tokens, std::vector<float>* logprobs,
                                 std::vector<float>* raw_logits) {
  const auto rows = static_cast<int64_t>(batch.logits_indices.size());
  const int64_t vocab = config().vocab_size;
  KV_CHECK(static_cast<int64_t>(sampling.rows.size()) == rows,
           "forward_sample: {} rows of sampling parameters for {} logits rows",
           sampling.rows.size(), rows);
  const bool penalties = !sampling.penalty_offsets.empty();
  KV_CHECK(!penalties || static_cast<int64_t>(sampling.penalty_offsets.size()) == rows + 1,
           "forward_sample: {} penalty offsets for {} rows", sampling.penalty_offsets.size(), rows);
  KV_CHECK(sampling.raw_rows.empty() || raw_logits != nullptr,
           "forward_sample: raw rows asked for without a buffer");
  tokens.resize(static_cast<size_t>(rows));
  if (logprobs != nullptr) logprobs->resize(static_cast<size_t>(rows));
  // The raw rows, copied out of `logits` (host or device memory) before the sampler rewrites any.
  auto copy_raw_rows = [&](const float* logits, platform::CopyKind kind) {
    if (raw_logits == nullptr) return;
    raw_logits->resize(sampling.raw_rows.size() * static_cast<size_t>(vocab));
    for (size_t i = 0; i < sampling.raw_rows.size(); ++i) {
      const int32_t r = sampling.raw_rows[i];
      KV_CHECK(r >= 0 && r < rows, "forward_sample: raw row {} of {}", r, rows);
      platform_->copy(raw_logits->data() + i * vocab, logits + int64_t{r} * vocab,
                      static_cast<size_t>(vocab) * sizeof(float), kind);
    }
  };
  ops::SampleRowsParams params;
  params.rows = rows;
  params.vocab = vocab;
  params.ld = vocab;
  if (platform_->device().is_cpu() || whisper_ != nullptr) {  // logits on the host
    KV_RETURN_IF_ERROR(forward_local(batch, host_logits_));
    copy_raw_rows(host_logits_.data(), platform::CopyKind::kHostToHost);
    params.logits = host_logits_.data();
    params.row_params = sampling.rows.data();
    if (penalties) {
      params.penalty_offsets = sampling.penalty_offsets.data();
      params.penalty_entries = sampling.penalty_entries.data();
    }
    params.out_tokens = tokens.data();
    params.out_logprobs = logprobs != nullptr ? logprobs->data() : nullptr;
    ops::cpu::sample_rows(params);  // host logits, on any device
    return Status::ok();
  }
  if (rows == 0) {  // a prefill of intermediate chunks only: nothing to sample
    return forward_local(batch, host_logits_);
  }
  // Every buffer the sampler needs is grown before the forward is queued: a failure queues nothing.
  KV_RETURN_IF_ERROR(reserve_sampling_buffers(rows, sampling, logprobs != nullptr));
  if (use_graph(batch)) {
    KV_RETURN_IF_ERROR(graphs_->replay_queued(batch));
    params.logits = model_->static_logits();
  } else {
    Status s = prepare(batch);
    if (s.is_ok()) {
      auto logits = model_->forward_on_device(batch, *backend_);
      if (logits.is_ok()) params.logits = *logits;
      s = logits.status();
    }
    if (!s.is_ok()) {
      stream_->synchronize();  // the failed forward's queued work, before its buffers go
      return s;
    }
  }
  copy_raw_rows(params.logits, platform::CopyKind::kDeviceToHost);
  // Queued after the forward on the same stream; the host copies are staged by the driver.
  auto to_device = [&](Buffer& buf, const void* src, size_t bytes) -> void* {
    KV_CHECK_GE(buf.bytes(), bytes, "forward_sample: reserve_sampling_buffers first");
    if (src != nullptr && bytes > 0) {
      platform_->copy(buf.data(), src, bytes, platform::CopyKind::kHostToDevice);
    }
    return buf.data();
  };
  params.row_params = static_cast<const ops::SampleRowParams*>(
      to_device(sampling_.params, sampling.rows.data(), sampling.rows.size_bytes()));
  if (penalties) {
    params.penalty_offsets = static_cast<const int32_t*>(to_device(
        sampling_.offsets, sampling.penalty_offsets.data(), sampling.penalty_offsets.size_bytes()));
    params.penalty_entries = static_cast<const ops::PenaltyEntry*>(
        to_device(sampling_.entries, sampling.penalty_entries.data(),
                  std::max<size_t>(1, sampling.penalty_entries.size_bytes())));
  }
  params.out_tokens = static_cast<int32_t*>(
      to_device(sampling_.tokens, nullptr, static_cast<size_t>(rows) * sizeof(int32_t)));
  if (logprobs != nullptr) {
    params.out_logprobs = static_cast<float*>(
        to_device(sampling_.logprobs, nullptr, static_cast<size_t>(rows) * sizeof(float)));
  }
  ops::sample_rows(*platform_, params);
  platform_->copy(tokens.data(), params.out_tokens, tokens.size() * sizeof(int32_t),
                  platform::CopyKind::kDeviceToHost);
  if (logprobs != nullptr) {
    platform_->copy(logprobs->data(), params.out_logprobs, logprobs->size() * sizeof(float),
                    platform::CopyKind::kDeviceToHost);
  }
  stream_->synchronize();
  return Status::ok();
}

std::string ModelRunner::summary() const {
  const mem::KvPoolConfig& p = kv_pool_->config();
  if (whisper_ != nullptr) {
    const checkpoint::WhisperConfig& c = whisper_->config();
    return fmt::format(
        "{} {}+{}L/{}H on {}: weights {}; KV cache {} x {} tokens ({}), page size {}, encoder KV "
        "layout {}; max_running_requests {}, decoder context {}; attention backend {}",
        config_.architecture_name, c.encoder_layers, c.decoder_layers, c.decoder_attention_heads,
        platform_->device().to_string(), mib(whisper_->weight_bytes()), dtype_name(p.dtype), p.size,
        mib(p.bytes_per_token() * (p.size + p.page_size)), p.page_size,
        mem::encoder_kv_layout_name(encoder_kv_layout_), max_running_, context_len_,
        backend_->name());
  }
  return fmt::format(
      "{} {} on {}: weights {}; KV cache {} x {} tokens ({}), page size {}; "
      "max_running_requests {}, context {}; attention backend {}{}{}",
      config().architecture_name,
      fmt::format("{}L/{}H/{}KV", config().num_hidden_layers, config().num_attention_heads,
                  config().num_key_value_heads),
      platform_->device().to_string(), mib(model_->weight_bytes()), dtype_name(p.dtype), p.size,
      mib(p.bytes_per_token() * (p.size + p.page_size)), p.page_size, max_running_, context_len_,
      backend_->name(),
      graphs_ != nullptr ? fmt::format("; decode graphs bs 1..{}", graphs_->max_bs()) : "",
      model_->shard().size > 1
          ? fmt::format("; tensor parallel rank {} of {} ({} heads, {} KV heads per rank)",
                        model_->shard().rank, model_->shard().size, model_->shard().heads,
                        model_->shard().kv_heads)
          : "");
}

}  // namespace kvserve::model
