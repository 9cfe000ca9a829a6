#include "kvserve/model/whisper_runner.h"

#include "kvserve/checkpoint/weights.h"
#include "kvserve/mem/common.h"
#include "kvserve/platform/device_pool.h"
#include "kvserve/platform/platform.h"

namespace kvserve::model {

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
  KV_ASSIGN_OR_RETURN(const checkpoint::WhisperConfig config, checkpoint::load_whisper_config(dir));
  ModelRunnerOptions ro;
  KV_ASSIGN_OR_RETURN(ro.device, platform::parse_device(o.device));
  ro.page_size = o.page_size;
  if (!o.attention_backend.empty()) {
    KV_ASSIGN_OR_RETURN(ro.attention_backend,
                        attention::parse_attention_backend(o.attention_backend));
  }
  ro.encoder_kv_layout = o.layout;
  ro.max_running_requests = o.max_running_requests;
  ro.device_pool = o.device_pool;
  ro.kernel_switches = o.kernel_switches;
  ro.disable_cuda_graph = true;
  // 0: every row filled (encoder region + max_target_positions), in whole pages.
  ro.max_total_tokens = o.max_total_tokens;
  if (ro.max_total_tokens <= 0) {
    const int64_t row_len =
        mem::encoder_reserved_len(config.max_source_positions, o.page_size, o.layout) +
        config.max_target_positions;
    ro.max_total_tokens = int64_t{o.max_running_requests} * mem::ceil_align(row_len, o.page_size);
  }
  std::unique_ptr<WhisperRunner> r(new WhisperRunner());
  // ModelRunner::create checks the model and the layout against the backend's capabilities
  // (attention/capabilities.h) before anything is loaded.
  KV_ASSIGN_OR_RETURN(r->runner_, ModelRunner::create(dir, ro));
  if (!r->runner_->is_encoder_decoder()) {
    return invalid_argument("{}: not a Whisper checkpoint", dir.string());
  }
  r->options_ = o;
  r->options_.attention_backend = std::string(r->runner_->backend().name());
  r->memory_.emplace(r->runner_->kv_shape(), mem::PrefixCacheKind::kChunk);
  return r;
}

Status WhisperRunner::forward(mem::ForwardBatch& batch, std::vector<float>& logits,
                              const void* encoder_hidden) {
  KV_CHECK(batch.req_to_token == &memory_->req_to_token(), "a batch of this runner's table");
  if (encoder_hidden == nullptr) return runner_->forward(batch, logits);
  return runner_->forward_encoded(batch, logits, encoder_hidden);
}

}  // namespace kvserve::model
