#include "kvserve/model/whisper_runner.h"

#include "kvserve/mem/common.h"

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
  KV_ASSIGN_OR_RETURN(const WhisperConfig config, load_whisper_config(dir));
  ModelRunnerOptions ro;
  ro.device = o.device;
  ro.page_size = o.page_size;
  ro.attention_backend = o.attention_backend;
  ro.encoder_kv_layout = o.layout;
  ro.max_running_requests = o.max_running_requests;
  ro.device_pool = o.device_pool;
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
  KV_ASSIGN_OR_RETURN(r->runner_, ModelRunner::create(dir, ro));
  if (!r->runner_->is_encoder_decoder()) {
    return invalid_argument("{}: not a Whisper checkpoint", dir.string());
  }
  r->options_ = o;
  r->options_.attention_backend = std::string(r->runner_->backend().name());
  r->cache_ =
      std::make_unique<mem::ChunkCache>(r->runner_->req_to_token(), r->runner_->allocator());
  return r;
}

void WhisperRunner::forward(mem::ForwardBatch& batch, std::vector<float>& logits,
                            const void* encoder_hidden) {
  if (encoder_hidden == nullptr) {
    runner_->forward(batch, logits);
    return;
  }
  batch.req_to_token = &runner_->req_to_token();
  batch.req_to_token_device = runner_->req_to_token_device();
  batch.kv_pool = &runner_->kv_pool();
  runner_->backend().init_forward_metadata(batch);
  runner_->whisper_model().forward(batch, runner_->backend(), logits, encoder_hidden);
}

}  // namespace kvserve::model
