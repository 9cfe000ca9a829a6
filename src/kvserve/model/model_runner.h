// ModelRunner: one model instance on one platform with its KV memory (SGLang's ModelRunner).
//
// create() reserves the device memory pool (device platforms; platform/device_pool.h), reads the
// checkpoint directory (config.json, safetensors), loads the weights into the pool, sizes the KV
// pool (--max-total-tokens, or --mem-fraction-static of the memory left after the weights: of the
// device pool on a GPU), the device mirror of the request-to-token table on a device platform,
// and the attention backend; on a device platform it runs everything on a stream of its own and,
// unless --disable-cuda-graph, captures the decode graphs (decode_graph_runner.h) once the pools
// exist. The host side of the KV memory (request-to-token table, slot allocator, prefix cache)
// belongs to whoever schedules: a mem::HostKvMemory of this runner's kv_shape(). The runner
// reads the host table only through the batches built from it (BatchRunner).
//
// The model is a decoder-only CausalLM or, for a checkpoint whose config.json says model_type
// "whisper", the encoder-decoder WhisperModel (is_encoder_decoder()): its KV pool holds the
// decoder's layers in the compute dtype, each request row is [encoder region | decoder region]
// in the encoder KV layout of the options (mem/encoder_layout.h; batches built with
// mem::EncoderSplit{page_size(), encoder_kv_layout()}), and a forward whose batch carries
// encoder inputs (ForwardBatch::encoder_inputs) runs the encoder on them first (the encoder is
// part of the prefill; its cross-attention K/V are stored once, at batch.encoder_out_cache_loc).
// config() describes either model to the scheduler and the engine (vocabulary, eos, layers).
#pragma once

#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "kvserve/attention/backend.h"
#include "kvserve/attention/capabilities.h"
#include "kvserve/checkpoint/whisper_config.h"
#include "kvserve/mem/device_req_to_token.h"
#include "kvserve/mem/encoder_layout.h"
#include "kvserve/mem/host_kv_memory.h"
#include "kvserve/mem/kv_pool.h"
#include "kvserve/model/batch_runner.h"
#include "kvserve/model/causal_lm.h"
#include "kvserve/model/decode_graph_runner.h"
#include "kvserve/model/tp_group.h"
#include "kvserve/model/whisper_model.h"
#include "kvserve/platform/device_pool.h"
#include "kvserve/platform/ops/sampling_params.h"

namespace kvserve::model {

// Typed: the command line parses names into these at its boundary (cli/runner_options.h).
struct ModelRunnerOptions {
  Device device{DeviceKind::kCpu, 0};
  int32_t page_size = 1;
  // nullopt: the device's default (attention/capabilities.h).
  std::optional<attention::AttentionBackendKind> attention_backend;
  // nullopt (--kv-cache-dtype auto): the compute dtype (f32 on the CPU, bf16 on CUDA).
  std::optional<DType> kv_cache_dtype;
  int64_t max_total_tokens = 0;    // 0: from mem_fraction_static
  double mem_fraction_static = 0;  // of the free memory after the weights; 0: the device's default
                                   // (CPU: 0.25, at most 4 GiB; CUDA: 0.85)
  int32_t max_running_requests = 0;  // 0: the device's default (CPU: 64, CUDA: 256)
  int64_t context_length = 0;        // 0: the config's max_position_embeddings
  bool show_progress = false;        // a progress bar on stderr while weights load
  // Decode graphs (decode_graph_runner.h) on device platforms whose attention backend has them:
  // batches of up to this many requests (0: kDefaultCudaGraphMaxBs; at most the request rows).
  int32_t cuda_graph_max_bs = 0;
  bool disable_cuda_graph = false;  // every forward eager
  // Device platforms: the pool every device allocation of this runner comes from, reserved right
  // after the platform is created (platform/device_pool.h); the KV cache is then sized from what
  // the pool has left after the weights. Tests that hold several CUDA runners at once, or share
  // the GPU with other test processes, set reserve = false or a fixed size.
  platform::DevicePoolOptions device_pool;
  // Device platforms: bytes of the pool another component takes after the runner (the
  // disaggregation staging buffer), kept out of the share the KV cache is sized from so that
  // activations keep their room.
  size_t reserved_device_bytes = 0;
  // Tests only: fault injection on this runner's device-buffer allocations (installed on its
  // platform at creation; platform/allocation_faults.h). Null in production.
  std::shared_ptr<platform::AllocationFaults> allocation_faults;
  // The CUDA kernels' A/B switches (platform/kernel_switches.h), set on the runner's platform and
  // logged once at creation on a device; the command line fills them from the environment.
  platform::KernelSwitches kernel_switches;
  // Encoder-decoder (Whisper) checkpoints: where each row's decoder region starts (aligned: on a
  // page boundary; ragged: right after the encoder). With the ragged layout and pages over 1, the
  // CUDA default backend is cuda-ragged (cuda-paged reads whole pages and is refused by the
  // capability check).
  mem::EncoderKvLayout encoder_kv_layout = mem::EncoderKvLayout::kAligned;
  // Tensor parallelism (docs/tensor-parallel.md): --tp-size ranks, one process each. create()
  // with tp_size > 1 makes this process rank 0: it launches ranks 1..N-1 (`tp-worker`
  // subcommands of `tp_worker_executable`, default /proc/self/exe: this kvserve binary) through
  // a TpGroup (tp_group.h) and announces every forward to them before running its own shard. On
  // CUDA rank r uses device device.index + r (--base-gpu-id). Whisper is refused.
  int32_t tp_size = 1;
  std::filesystem::path tp_worker_executable;
  // bench-one-batch --tp-group-of-one: tp_size 1 as a group of one rank (no worker), every
  // collective of the forward still through the group's communicator (NCCL on CUDA).
  bool tp_group_of_one = false;
  // --base-gpu-id: CUDA device of rank 0 (-1: device.index); rank r uses it + r.
  int32_t base_gpu_id = -1;
  // --nccl-port: accepted for SGLang command lines and unused (NCCL's unique id crosses the
  // shared-memory control channel; nothing listens on a port).
  int32_t nccl_port = 0;
  // Rank 0: called once, on the engine thread, when the group fails (a worker died, a forward's
  // collective failed): the forward returns the error (its requests fail) and every later
  // forward fails at once; serve stops the server here.
  std::function<void(const Status&)> on_tp_failure;
  // Set by the group (rank 0) or the worker, not by callers: this runner is one rank, holding its
  // shard of a decoder-only model and a KV pool of its KV heads with the slot count every rank
  // agreed on (the smallest any can hold).
  TensorParallel tp;
};

// True when <dir>/config.json reads and its model_type is "whisper" (ModelRunner then runs a
// WhisperModel).
bool is_whisper_checkpoint(const std::filesystem::path& dir);

class ModelRunner final : public BatchRunner {
 public:
  // Refuses, before any weight is read or device memory reserved, a model the attention backend
  // cannot serve with these options (capabilities.h: kUnimplemented naming the config field or
  // the flag and the supported values; a sliding window shorter than the context length served
  // on a backend without windows: "sliding_window"). A window at least the served context
  // becomes full attention (checkpoint::served_window_left).
  static Result<std::unique_ptr<ModelRunner>> create(const std::filesystem::path& model_dir,
                                                     const ModelRunnerOptions& options);
  // What the model in `config` asks of attention with `options` (the capability check's input).
  static attention::AttentionRequirements attention_requirements(
      const checkpoint::ModelConfig& config, const ModelRunnerOptions& options);
  // The same for a Whisper checkpoint (its decoder's self- and cross-attention).
  static attention::AttentionRequirements whisper_attention_requirements(
      const checkpoint::WhisperConfig& config, const ModelRunnerOptions& options);
  ~ModelRunner();

  const checkpoint::ModelConfig& config() const { return config_; }
  platform::Platform& platform() { return *platform_; }
  // Device platforms: the req_to_token mirror the device backends read (null on the CPU).
  mem::DeviceReqToToken* req_to_token_device() { return req_to_token_device_.get(); }
  mem::MHATokenToKVPool& kv_pool() { return *kv_pool_; }
  attention::AttentionBackend& backend() { return *backend_; }
  int32_t page_size() const { return page_size_; }
  int64_t max_total_tokens() const { return kv_pool_->config().size; }
  int32_t max_running_requests() const { return max_running_; }
  // The host KV memory (mem::HostKvMemory) that batches for this runner come from.
  mem::KvMemoryShape kv_shape() const {
    return {.max_running_requests = max_running_,
            .row_len = row_len_,
            .max_total_tokens = max_total_tokens(),
            .page_size = page_size_};
  }

  // BatchRunner.
  int32_t vocab_size() const override { return config().vocab_size; }
  int32_t context_len() const override { return context_len_; }
  bool samples_on_device() const override { return !platform_->device().is_cpu(); }

  // Encoder-decoder models (Whisper); the accessors below CHECK that the model is one.
  bool is_encoder_decoder() const { return whisper_ != nullptr; }
  WhisperModel& whisper_model();
  const checkpoint::WhisperConfig& whisper_config() const;
  const checkpoint::WhisperGenerationConfig& whisper_generation_config() const;
  mem::EncoderKvLayout encoder_kv_layout() const { return encoder_kv_layout_; }
  // Positions one encoder output fills (max_source_positions), and the positions the encoder
  // region of a row takes in this runner's layout (the decoder region starts there).
  int32_t encoder_len() const;
  int32_t encoder_reserved_len(int32_t encoder_len) const;
  // The encoder inputs' expected size (num_mel_bins * input_frames floats).
  int64_t encoder_input_size() const;

  // Attention metadata once, then the model; logits of batch.logits_indices, [n, vocab]. A decode
  // batch that fits a captured graph replays it instead (same kernels, padded to the bucket).
  // kOutOfMemory when a device buffer this forward needs (activations, attention metadata, page
  // lists, split workspace, sampling buffers) cannot grow: the outputs are garbage, the batch's
  // KV slots hold nothing usable, and the runner serves the next forward normally.
  // Encoder-decoder models: the encoder runs first on batch.encoder_inputs (host memory; one per
  // request of batch.encoder_lens > 0 whose encoder K/V this forward stores, in the order of
  // batch.encoder_out_cache_loc; sizes checked by the caller: encoder_input_size()): the encoder
  // is the first part of the prefill, its outputs' cross K/V stored by the decoder's forward.
  Status forward(mem::ForwardBatch& batch, std::vector<float>& logits) override;
  // The same with `encoder_inputs` as the batch's encoder inputs.
  Status forward(mem::ForwardBatch& batch, std::vector<float>& logits,
                 std::span<const std::span<const float>> encoder_inputs);
  // Encoder-decoder models: the decoder's forward over encoder outputs the caller computed
  // (`encoder_hidden`: device memory of the model's dtype, request-major in the order of
  // batch.encoder_out_cache_loc; WhisperModel::encode), for reference decoding and tests.
  Status forward_encoded(mem::ForwardBatch& batch, std::vector<float>& logits,
                         const void* encoder_hidden);
  // The same, keeping only each row's argmax (computed on the device).
  Status forward_greedy(mem::ForwardBatch& batch, std::vector<int32_t>& tokens) override;

  // The same forward, then ops::sample_rows over its logits rows with `sampling` (one row of
  // parameters per logits row; greedy rows are argmax rows of the same launch). On a device the
  // logits never leave it: the graph replay or the eager forward is followed by the sampling
  // kernel on the runner's stream (after the replay, not inside the graph), and only the tokens
  // (and, with `logprobs`, each chosen token's raw logprob; with sampling.raw_rows, those rows'
  // raw logits into `raw_logits`) come back. On the CPU the logits are sampled in place on the
  // host by the same op.
  Status forward_sample(mem::ForwardBatch& batch, const SamplingInputs& sampling,
                        std::vector<int32_t>& tokens, std::vector<float>* logprobs = nullptr,
                        std::vector<float>* raw_logits = nullptr) override;

  // Encoder-decoder models, for bench-one-batch: while on, a forward that runs the encoder
  // synchronizes the device before and after it and records the encoder's seconds
  // (last_encoder_seconds). Off while serving.
  void set_encoder_timing(bool on) { encoder_timing_ = on; }
  double last_encoder_seconds() const { return last_encoder_seconds_; }

  // The captured decode graphs; null on the CPU, with --disable-cuda-graph, or for a backend
  // without them.
  const DecodeGraphRunner* decode_graphs() const { return graphs_.get(); }
  // Tests: false runs every forward eagerly on the same runner (graphs stay captured).
  void set_decode_graphs_enabled(bool enabled) { graphs_enabled_ = enabled; }

  // Rank 0 of a tensor-parallel group: the group (null otherwise); tests read its workers.
  const TpGroup* tp_group() const { return tp_group_.get(); }
  // "KV cache: f32, 131072 tokens (12.0 MiB), page size 16; weights 5.3 MiB; backend cpu"
  std::string summary() const;

 private:
  ModelRunner() = default;
  // Rank 0 of --tp-size N: checks, launches the group, then creates this rank's runner in it.
  static Result<std::unique_ptr<ModelRunner>> create_tp_leader(
      const std::filesystem::path& model_dir, const ModelRunnerOptions& options);
  // Rank 0 of a group: the batch to the workers (a failure fails the group).
  Status announce(const mem::ForwardBatch& batch);
  // Rank 0 of a group: a failed forward leaves the ranks out of step; the group is failed.
  Status after_forward(Status s);
  // forward_sample without the announcement.
  Status sample_local(mem::ForwardBatch& batch, const SamplingInputs& sampling,
                      std::vector<int32_t>& tokens, std::vector<float>* logprobs,
                      std::vector<float>* raw_logits);
  // The forward without the announcement (forward_greedy and forward_sample run it).
  Status forward_local(mem::ForwardBatch& batch, std::vector<float>& logits);
  // Points the batch at this runner's device buffers (the KV pool, the req_to_token mirror): the
  // only place a batch gets them.
  void bind(mem::ForwardBatch& batch);
  // Builds the backend's metadata of an eager forward (once per forward).
  Status prepare(mem::ForwardBatch& batch);
  // Grows forward_sample's device buffers for `rows` rows of `sampling` (before the forward).
  Status reserve_sampling_buffers(int64_t rows, const SamplingInputs& sampling, bool logprobs);
  // Binds `batch` (every forward starts here), then whether it replays a decode graph.
  bool use_graph(mem::ForwardBatch& batch);
  // Whisper: the model, its KV pool, rows and backend (create() after the platform).
  Status load_whisper(const std::filesystem::path& model_dir,
                      const checkpoint::WhisperConfig& config,
                      attention::AttentionBackendKind backend, const ModelRunnerOptions& options);
  // Whisper: the encoder over batch.encoder_inputs into encoder_hidden_; null when there are none.
  Result<const void*> encode_inputs(const mem::ForwardBatch& batch);

  // Rank 0 of a tensor-parallel group: sends each batch to the workers before the forward. First
  // member: destroyed last, after the model whose collectives use its communicators.
  std::unique_ptr<TpGroup> tp_group_;
  std::function<void(const Status&)> on_tp_failure_;
  bool tp_failure_reported_ = false;  // on_tp_failure_ runs once
  std::unique_ptr<platform::Platform> platform_;
  // Device platforms: the stream every forward of this runner runs on (the platform's current
  // stream), so that eager forwards and graph replays are ordered and graphs can be captured.
  std::unique_ptr<platform::Stream> stream_;
  checkpoint::ModelConfig config_;
  std::unique_ptr<CausalLM> model_;  // decoder-only checkpoints
  // Encoder-decoder (Whisper) checkpoints, instead of model_.
  std::unique_ptr<WhisperModel> whisper_;
  checkpoint::WhisperGenerationConfig whisper_generation_;
  mem::EncoderKvLayout encoder_kv_layout_ = mem::EncoderKvLayout::kAligned;
  Tensor encoder_hidden_;  // the encoder outputs of one prefill, grown on demand
  bool encoder_timing_ = false;
  double last_encoder_seconds_ = 0;
  std::unique_ptr<mem::DeviceReqToToken> req_to_token_device_;
  std::unique_ptr<mem::MHATokenToKVPool> kv_pool_;
  std::unique_ptr<attention::AttentionBackend> backend_;
  // forward_sample's device buffers, grown on demand: row parameters, the penalty CSR, tokens and
  // logprobs (one allocation each, reused every step).
  struct SamplingBuffers {
    Buffer params, offsets, entries, tokens, logprobs;
  };
  SamplingBuffers sampling_;
  std::vector<float> host_logits_;             // the CPU's forward_sample
  std::unique_ptr<DecodeGraphRunner> graphs_;  // last: destroyed first
  bool graphs_enabled_ = true;
  int32_t page_size_ = 1;
  int32_t context_len_ = 0;
  int32_t max_running_ = 0;  // request rows of the host table (kv_shape)
  int32_t row_len_ = 0;      // positions per row
};

}  // namespace kvserve::model
