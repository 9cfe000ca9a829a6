#include "kvserve/model/whisper_runner.h"

#include "kvserve/checkpoint/weights.h"
#include "kvserve/mem/common.h"
#include "kvserve/platform/device_pool.h"
#include "kvserve/platform/platform.h"

namespace kvserve::model {
namespace {

// Extra req_to_token columns beyond a full row (SGLang: +4 for speculative slack).
constexpr int32_t kContextSlack = 4;

}  // namespace

WhisperRunner::~WhisperRunner() = default;

Result<std::unique_ptr<WhisperRunner>> WhisperRunner::create(const std::filesystem::path& dir,
                                                             const WhisperRunnerOptions& o) {
  if (o.page_size < 1 || o.page_size > 128) {
    return invalid_argument("--page-size must be in 1..128, got {}", o.page_size);
  }
  if (o.max_running_requests < 1) {
    return invalid_argument("--max-running-requests must be positive, got {}",
                            o.max_running_requests);
  }
  std::unique_ptr<WhisperRunner> r(new WhisperRunner());
  r->options_ = o;
  KV_ASSIGN_OR_RETURN(const Device device, platform::parse_device(o.device));
  std::string& backend = r->options_.attention_backend;
  if (backend.empty()) {
    backend = attention::attention_backend_name(attention::default_attention_backend(device.kind));
    if (!device.is_cpu() && o.layout == mem::EncoderKvLayout::kRagged && o.page_size > 1) {
      backend = "cuda-ragged";
    }
  }
  KV_ASSIGN_OR_RETURN(const attention::AttentionBackendKind backend_kind,
                      attention::parse_attention_backend(backend));
  // The model and the layout against the backend's capabilities (attention/capabilities.h),
  // before anything is loaded.
  KV_ASSIGN_OR_RETURN(const checkpoint::WhisperConfig config, checkpoint::load_whisper_config(dir));
  attention::AttentionRequirements need;
  need.head_dim_field = "d_model / decoder_attention_heads";
  need.heads_field = "decoder_attention_heads";
  need.kv_heads_field = "decoder_attention_heads";
  need.num_q_heads = config.decoder_attention_heads;
  need.num_kv_heads = config.decoder_attention_heads;
  need.head_dim = config.decoder_head_dim();
  need.cross_attention = true;
  need.ragged_encoder_rows = o.layout == mem::EncoderKvLayout::kRagged;
  need.page_size = o.page_size;
  need.kv_dtype = device.is_cpu() ? DType::kF32 : DType::kBF16;  // the compute dtype
  need.device = device.kind;
  KV_RETURN_IF_ERROR(attention::check_attention_support(backend_kind, need));
  KV_ASSIGN_OR_RETURN(r->platform_, platform::create_platform(device));
  r->platform_->set_kernel_switches(o.kernel_switches);
  // Before anything is allocated: weights, KV cache and activations all come from the pool.
  KV_RETURN_IF_ERROR(platform::reserve_device_pool(*r->platform_, o.device_pool));
  KV_ASSIGN_OR_RETURN(r->generation_, checkpoint::load_whisper_generation_config(dir));
  KV_ASSIGN_OR_RETURN(auto weights, checkpoint::WeightStore::open(dir));
  KV_ASSIGN_OR_RETURN(r->model_, WhisperModel::load(config, *weights, *r->platform_));
  KV_ASSIGN_OR_RETURN(r->backend_,
                      attention::create_attention_backend(backend_kind, *r->platform_));

  // A full row: the encoder region (page-aligned in the aligned layout) and every decoder
  // position; in whole pages, since the allocator hands out pages.
  const int64_t row_len =
      r->encoder_reserved_len(config.max_source_positions) + config.max_target_positions;
  int64_t tokens = o.max_total_tokens;
  if (tokens <= 0) tokens = int64_t{o.max_running_requests} * mem::ceil_align(row_len, o.page_size);
  tokens = mem::floor_align(tokens, o.page_size);
  if (tokens < o.page_size) return out_of_memory("no room for a KV cache: {} tokens", tokens);
  const mem::KvPoolConfig pool{.num_layers = config.decoder_layers,
                               .num_kv_heads = config.decoder_attention_heads,
                               .head_dim = config.decoder_head_dim(),
                               .size = tokens,
                               .page_size = o.page_size,
                               .dtype = r->model_->dtype()};
  KV_ASSIGN_OR_RETURN(r->kv_pool_, mem::MHATokenToKVPool::create(*r->platform_, pool));
  r->allocator_ = mem::make_allocator(tokens, o.page_size);
  r->req_to_token_ = std::make_unique<mem::ReqToTokenPool>(
      o.max_running_requests, static_cast<int32_t>(row_len) + kContextSlack);
  r->cache_ = std::make_unique<mem::ChunkCache>(*r->req_to_token_, *r->allocator_);
  if (!r->platform_->device().is_cpu()) {
    // The device attention backends read rows, encoder region included, through this mirror.
    KV_ASSIGN_OR_RETURN(r->req_to_token_device_,
                        mem::DeviceReqToToken::create(*r->platform_, *r->req_to_token_));
  }
  return r;
}

int32_t WhisperRunner::encoder_reserved_len(int32_t encoder_len) const {
  return mem::encoder_reserved_len(encoder_len, options_.page_size, options_.layout);
}

Status WhisperRunner::forward(mem::ForwardBatch& batch, std::vector<float>& logits,
                              const void* encoder_hidden) {
  KV_CHECK(batch.req_to_token == req_to_token_.get(), "a batch of this runner's table");
  batch.req_to_token_device = req_to_token_device_.get();
  batch.kv_pool = kv_pool_.get();
  KV_RETURN_IF_ERROR(backend_->init_forward_metadata(batch));
  return model_->forward(batch, *backend_, logits, encoder_hidden);
}

}  // namespace kvserve::model
