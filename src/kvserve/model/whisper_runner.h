// WhisperRunner: a ModelRunner of a Whisper checkpoint (which owns the platform, weights, the KV
// pool of decoder_layers layers, the attention backend and the encoder KV layout) with the host
// side of its KV memory (mem::HostKvMemory of the runner's kv_shape(): the request-to-token
// table, the slot allocator and a ChunkCache, nothing shared between requests), for callers that
// drive batches by hand: tests and their reference decoding (whisper_generate). Batches come from
// mem::prepare_extend / prepare_decode over memory() with encoder_split(). The KV pool holds the
// model's compute dtype (f32 on the CPU, bf16 on CUDA). Serving goes through the engine
// (engine/engine.h), which runs the same ModelRunner.
#pragma once

#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "kvserve/attention/backend.h"
#include "kvserve/checkpoint/whisper_config.h"
#include "kvserve/mem/allocation.h"
#include "kvserve/mem/allocator.h"
#include "kvserve/mem/batch_lifecycle.h"
#include "kvserve/mem/encoder_layout.h"
#include "kvserve/mem/host_kv_memory.h"
#include "kvserve/mem/kv_pool.h"
#include "kvserve/mem/req_to_token_pool.h"
#include "kvserve/model/model_runner.h"
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
  // The CUDA kernels' A/B switches (platform/kernel_switches.h), set on the runner's platform.
  platform::KernelSwitches kernel_switches;
};

class WhisperRunner {
 public:
  // Reads <dir>/config.json, generation_config.json and the safetensors weights; refuses, before
  // loading, a layout or page size the attention backend cannot serve (attention/capabilities.h).
  static Result<std::unique_ptr<WhisperRunner>> create(const std::filesystem::path& model_dir,
                                                       const WhisperRunnerOptions& options);
  ~WhisperRunner();

  const checkpoint::WhisperConfig& config() const { return runner_->whisper_config(); }
  const checkpoint::WhisperGenerationConfig& generation_config() const {
    return runner_->whisper_generation_config();
  }
  const WhisperRunnerOptions& options() const { return options_; }
  ModelRunner& runner() { return *runner_; }
  WhisperModel& model() { return runner_->whisper_model(); }
  platform::Platform& platform() { return runner_->platform(); }
  mem::MHATokenToKVPool& kv_pool() { return runner_->kv_pool(); }
  mem::ReqToTokenPool& req_to_token() { return memory_->req_to_token(); }
  mem::BaseTokenToKVPoolAllocator& allocator() { return memory_->allocator(); }
  attention::AttentionBackend& backend() { return runner_->backend(); }
  mem::KvMemory memory() { return memory_->view(); }
  // How batches of this runner lay out their rows (prepare_extend / prepare_decode).
  mem::EncoderSplit encoder_split() const { return {options_.page_size, options_.layout}; }

  // Positions the encoder region of a row takes in this runner's layout.
  int32_t encoder_reserved_len(int32_t encoder_len) const {
    return runner_->encoder_reserved_len(encoder_len);
  }

  // Attention metadata once, then the decoder (ModelRunner::forward_encoded; `encoder_hidden` is
  // device memory of the model's dtype: encoder outputs computed by the caller); null when every
  // request's encoder K/V is already cached (or it has none: the runner then runs the encoder on
  // batch.encoder_inputs, if any). kOutOfMemory when a device buffer cannot grow for this batch.
  Status forward(mem::ForwardBatch& batch, std::vector<float>& logits,
                 const void* encoder_hidden = nullptr);

 private:
  WhisperRunner() = default;

  WhisperRunnerOptions options_;
  std::unique_ptr<ModelRunner> runner_;
  std::optional<mem::HostKvMemory> memory_;  // of runner_->kv_shape(), a ChunkCache
};

}  // namespace kvserve::model
