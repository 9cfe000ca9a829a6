// WhisperRunner: a ModelRunner of a Whisper checkpoint (which owns the platform, weights, the KV
// pool of decoder_layers layers, the request-to-token table, the slot allocator, the attention
// backend and the encoder KV layout) with a ChunkCache on its pools (nothing is shared between
// requests), for callers that drive batches by hand: tests and their reference decoding
// (whisper_generate). The KV pool holds the model's compute dtype (f32 on the CPU, bf16 on CUDA).
// Serving goes through the engine (engine/engine.h), which runs the same ModelRunner.
#pragma once

#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "kvserve/attention/backend.h"
#include "kvserve/mem/allocation.h"
#include "kvserve/mem/allocator.h"
#include "kvserve/mem/chunk_cache.h"
#include "kvserve/mem/device_req_to_token.h"
#include "kvserve/mem/encoder_layout.h"
#include "kvserve/mem/kv_pool.h"
#include "kvserve/mem/req_to_token_pool.h"
#include "kvserve/model/model_runner.h"
#include "kvserve/model/whisper_config.h"
#include "kvserve/model/whisper_model.h"
#include "kvserve/platform/device_pool.h"

namespace kvserve::model {

struct WhisperRunnerOptions {
  std::string device = "cpu";  // "cpu", "cuda" or "cuda:N"
  int32_t page_size = 1;
  // Empty: the device's default for the layout: "cpu" on the CPU; on CUDA "cuda-paged" for the
  // aligned layout (or page size 1), "cuda-ragged" for the ragged one.
  std::string attention_backend;
  mem::EncoderKvLayout layout = mem::EncoderKvLayout::kAligned;
  int32_t max_running_requests = 8;
  // Slots in the pool; 0: every row filled (encoder + max_target_positions), page-aligned.
  int64_t max_total_tokens = 0;
  // Device platforms: the pool every device allocation of this runner comes from, reserved right
  // after the platform is created (platform/device_pool.h). Tests that hold several CUDA runners
  // at once, or share the GPU with other test processes, set reserve = false or a fixed size.
  platform::DevicePoolOptions device_pool;
};

class WhisperRunner {
 public:
  // Reads <dir>/config.json, generation_config.json and the safetensors weights.
  static Result<std::unique_ptr<WhisperRunner>> create(const std::filesystem::path& model_dir,
                                                       const WhisperRunnerOptions& options);
  ~WhisperRunner();

  const WhisperConfig& config() const { return runner_->whisper_config(); }
  const WhisperGenerationConfig& generation_config() const {
    return runner_->whisper_generation_config();
  }
  const WhisperRunnerOptions& options() const { return options_; }
  ModelRunner& runner() { return *runner_; }
  WhisperModel& model() { return runner_->whisper_model(); }
  platform::Platform& platform() { return runner_->platform(); }
  mem::MHATokenToKVPool& kv_pool() { return runner_->kv_pool(); }
  mem::ReqToTokenPool& req_to_token() { return runner_->req_to_token(); }
  mem::BaseTokenToKVPoolAllocator& allocator() { return runner_->allocator(); }
  attention::AttentionBackend& backend() { return runner_->backend(); }
  mem::KvMemory memory() { return {runner_->req_to_token(), runner_->allocator(), *cache_}; }

  // Positions the encoder region of a row takes in this runner's layout.
  int32_t encoder_reserved_len(int32_t encoder_len) const {
    return runner_->encoder_reserved_len(encoder_len);
  }

  // Attention metadata once, then the decoder (WhisperModel::forward; `encoder_hidden` is device
  // memory of the model's dtype: encoder outputs computed by the caller); null when every
  // request's encoder K/V is already cached (or it has none).
  void forward(mem::ForwardBatch& batch, std::vector<float>& logits,
               const void* encoder_hidden = nullptr);

 private:
  WhisperRunner() = default;

  WhisperRunnerOptions options_;
  std::unique_ptr<ModelRunner> runner_;
  std::unique_ptr<mem::ChunkCache> cache_;
};

}  // namespace kvserve::model
