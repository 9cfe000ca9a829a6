// WhisperRunner: one Whisper model instance with its KV memory, the encoder-decoder counterpart
// of ModelRunner (which serves decoder-only models): platform, weights, a KV pool of
// decoder_layers layers, the request-to-token table, the slot allocator, a ChunkCache (nothing
// is shared between requests) and the attention backend, plus the encoder KV layout
// (mem/encoder_layout.h) that decides where each row's decoder region starts. The KV pool holds
// the model's compute dtype (f32 on the CPU, bf16 on CUDA).
#pragma once

#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "kvserve/attention/backend.h"
#include "kvserve/checkpoint/whisper_config.h"
#include "kvserve/mem/allocation.h"
#include "kvserve/mem/allocator.h"
#include "kvserve/mem/chunk_cache.h"
#include "kvserve/mem/device_req_to_token.h"
#include "kvserve/mem/encoder_layout.h"
#include "kvserve/mem/kv_pool.h"
#include "kvserve/mem/req_to_token_pool.h"
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

  const checkpoint::WhisperConfig& config() const { return model_->config(); }
  const checkpoint::WhisperGenerationConfig& generation_config() const { return generation_; }
  const WhisperRunnerOptions& options() const { return options_; }
  WhisperModel& model() { return *model_; }
  platform::Platform& platform() { return *platform_; }
  mem::MHATokenToKVPool& kv_pool() { return *kv_pool_; }
  mem::ReqToTokenPool& req_to_token() { return *req_to_token_; }
  mem::BaseTokenToKVPoolAllocator& allocator() { return *allocator_; }
  attention::AttentionBackend& backend() { return *backend_; }
  mem::KvMemory memory() { return {*req_to_token_, *allocator_, *cache_}; }

  // Positions the encoder region of a row takes in this runner's layout.
  int32_t encoder_reserved_len(int32_t encoder_len) const;

  // Attention metadata once, then the decoder (WhisperModel::forward; `encoder_hidden` is device
  // memory of the model's dtype).
  void forward(mem::ForwardBatch& batch, std::vector<float>& logits,
               const void* encoder_hidden = nullptr);

 private:
  WhisperRunner() = default;

  WhisperRunnerOptions options_;
  checkpoint::WhisperGenerationConfig generation_;
  std::unique_ptr<platform::Platform> platform_;
  std::unique_ptr<WhisperModel> model_;
  std::unique_ptr<mem::ReqToTokenPool> req_to_token_;
  std::unique_ptr<mem::DeviceReqToToken> req_to_token_device_;  // device platforms only
  std::unique_ptr<mem::BaseTokenToKVPoolAllocator> allocator_;
  std::unique_ptr<mem::ChunkCache> cache_;
  std::unique_ptr<mem::MHATokenToKVPool> kv_pool_;
  std::unique_ptr<attention::AttentionBackend> backend_;
};

}  // namespace kvserve::model
