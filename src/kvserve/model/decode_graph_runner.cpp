#include "kvserve/model/decode_graph_runner.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <exception>

namespace kvserve::model {

std::vector<int32_t> decode_graph_batch_sizes(int32_t max_bs) {
  std::vector<int32_t> sizes;
  auto add = [&](int32_t bs) {
    if (bs <= max_bs) sizes.push_back(bs);
  };
  for (const int32_t bs : {1, 2, 4, 8})
    add(bs);
  for (int32_t bs = 16; bs <= 256; bs += 8)
    add(bs);
  for (int32_t bs = 272; bs < 512; bs += 16)
    add(bs);
  for (int32_t bs = 512; bs <= max_bs; bs += 32)
    add(bs);
  if (max_bs >= 1 && sizes.back() != max_bs) sizes.push_back(max_bs);
  return sizes;
}

int32_t decode_graph_bucket(const std::vector<int32_t>& sizes, int32_t bs) {
  const auto it = std::lower_bound(sizes.begin(), sizes.end(), bs);
  return it == sizes.end() ? 0 : *it;
}

mem::ForwardBatch pad_decode_batch(const mem::ForwardBatch& batch, int32_t bucket) {
  const int32_t bs = batch.batch_size();
  KV_CHECK(batch.is_decode() && batch.num_tokens() == bs, "pad_decode_batch: a decode batch");
  KV_CHECK_LE(bs, bucket, "a batch larger than its bucket");
  KV_CHECK(batch.encoder_lens.empty() && batch.self_kv_start.empty() &&
               batch.encoder_out_cache_loc.empty(),
           "pad_decode_batch: no encoder-decoder batches");
  KV_CHECK_EQ(batch.logits_indices.size(), static_cast<size_t>(bs), "one logits row per request");
  for (int32_t b = 0; b < bs; ++b)
    KV_CHECK_EQ(batch.logits_indices[b], b, "decode logits rows in request order");
  mem::ForwardBatch p = batch;
  const auto n = static_cast<size_t>(bucket);
  p.req_pool_indices.resize(n, 0);  // the padding row
  p.seq_lens.resize(n, 1);          // SGLang's seq_len fill value: position 0, one KV slot
  p.prefix_lens.resize(n, 0);
  p.extend_lens.resize(n, 1);
  p.input_ids.resize(n, 0);
  p.positions.resize(n, 0);
  p.out_cache_loc.resize(n, 0);  // the padding slot
  p.extend_start_loc.resize(n);
  p.logits_indices.resize(n);
  mem::pad_row_rewrites(p.row_rewrites, bucket - bs);  // nothing rewritten in the padding row
  for (int32_t b = bs; b < bucket; ++b) {
    p.extend_start_loc[b] = b;
    p.logits_indices[b] = b;
  }
  return p;
}

DecodeGraphRunner::DecodeGraphRunner(platform::Platform& platform, platform::StreamHandle stream,
                                     CausalLM& model, attention::AttentionBackend& backend)
    : platform_(platform), stream_(stream), model_(model), backend_(backend) {}

DecodeGraphRunner::~DecodeGraphRunner() {
  if (!graphs_.empty()) platform_.synchronize_stream(stream_);  // no replay still in flight
}

Result<std::unique_ptr<DecodeGraphRunner>> DecodeGraphRunner::create(
    platform::Platform& platform, platform::StreamHandle stream, CausalLM& model,
    attention::AttentionBackend& backend, mem::DeviceReqToToken* req_to_token_device,
    mem::MHATokenToKVPool& kv_pool, int32_t max_bs) {
  if (platform.device().is_cpu()) {
    return make_status(StatusCode::kUnimplemented, "the CPU platform has no graphs");
  }
  if (!backend.supports_decode_graphs()) {
    return make_status(StatusCode::kUnimplemented, "attention backend {} has no decode graphs",
                       backend.name());
  }
  if (stream.ptr == nullptr) {
    return invalid_argument("decode graphs are captured on a created stream, not the default one");
  }
  std::unique_ptr<DecodeGraphRunner> r(new DecodeGraphRunner(platform, stream, model, backend));
  if (req_to_token_device == nullptr) {
    return invalid_argument("decode graphs read the req_to_token mirror; none was given");
  }
  KV_RETURN_IF_ERROR(r->capture_all(req_to_token_device, kv_pool, max_bs));
  return r;
}

Status DecodeGraphRunner::capture_all(mem::DeviceReqToToken* req_to_token_device,
                                      mem::MHATokenToKVPool& kv_pool, int32_t max_bs) {
  const auto start = std::chrono::steady_clock::now();
  platform_.synchronize();
  const size_t free_before = platform_.memory_info().free_bytes;
  sizes_ = decode_graph_batch_sizes(std::min(max_bs, req_to_token_device->rows() - 1));
  if (sizes_.empty()) return invalid_argument("--cuda-graph-max-bs must be >= 1, got {}", max_bs);
  const int32_t largest = sizes_.back();

  // A request has at most a row's positions, and never more than the pool's slots.
  const checkpoint::ModelConfig& c = model_.config();
  const mem::KvPoolConfig& pool = kv_pool.config();
  const attention::DecodeGraphShape shape{.max_bs = largest,
                                          .max_kv_len = static_cast<int32_t>(std::min<int64_t>(
                                              req_to_token_device->stride(), pool.size)),
                                          .page_size = pool.page_size,
                                          .num_q_heads = c.num_attention_heads,
                                          .num_kv_heads = c.num_key_value_heads,
                                          .head_dim = c.head_dim};
  KV_ASSIGN_OR_RETURN(const int64_t plan_ints, backend_.init_decode_graph_state(shape));
  KV_RETURN_IF_ERROR(model_.reserve_static_workspace(largest));
  mem::ForwardBatch probe;
  probe.mode = mem::ForwardMode::kDecode;
  capacity_ = mem::batch_ints_size(pad_decode_batch(probe, largest)) + plan_ints;
  const size_t bytes = static_cast<size_t>(capacity_) * sizeof(int32_t);
  KV_ASSIGN_OR_RETURN(device_ints_, platform_.allocate_buffer(bytes));
  KV_ASSIGN_OR_RETURN(void* host, platform_.allocate_host(bytes));
  staging_ = std::unique_ptr<int32_t, PinnedHostDeleter>(static_cast<int32_t*>(host),
                                                         PinnedHostDeleter{&platform_, bytes});

  // Largest first (SGLang's order). Each size: stage an all-pad batch, run it once eagerly (which
  // loads every kernel and makes every cuBLASLt plan, so the capture allocates nothing), then
  // record the same forward.
  graphs_.resize(sizes_.size());
  mem::ForwardBatch empty;
  empty.mode = mem::ForwardMode::kDecode;
  empty.req_to_token_device = req_to_token_device;
  empty.kv_pool = &kv_pool;
  for (size_t i = sizes_.size(); i-- > 0;) {
    const mem::ForwardBatch dummy = pad_decode_batch(empty, sizes_[i]);
    KV_RETURN_IF_ERROR(stage(dummy));
    model_.forward_static(dummy, backend_, device_ints_.data_as<int32_t>());
    platform_.synchronize_stream(stream_);
    KV_RETURN_IF_ERROR(platform_.begin_capture(stream_));
    try {
      model_.forward_static(dummy, backend_, device_ints_.data_as<int32_t>());
    } catch (const std::exception& e) {
      (void)platform_.end_capture(stream_);  // leave capture mode; the recording is invalid
      return make_status(StatusCode::kInternal, "capturing the decode graph of batch size {}: {}",
                         sizes_[i], e.what());
    }
    auto graph = platform_.end_capture(stream_);
    if (!graph.is_ok()) {
      return make_status(StatusCode::kInternal, "capturing the decode graph of batch size {}: {}",
                         sizes_[i], graph.status().message());
    }
    graphs_[i] = platform::Graph(platform_, *graph);
  }
  platform_.synchronize();
  const size_t free_after = platform_.memory_info().free_bytes;
  memory_bytes_ = free_before > free_after ? free_before - free_after : 0;
  capture_seconds_ =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return Status::ok();
}

bool DecodeGraphRunner::can_run(const mem::ForwardBatch& batch) const {
  const int32_t bs = batch.batch_size();
  if (!batch.is_decode() || bs < 1 || bs > max_bs() || batch.num_tokens() != bs ||
      !batch.encoder_lens.empty() || !batch.self_kv_start.empty() ||
      !batch.encoder_out_cache_loc.empty() ||
      batch.logits_indices.size() != static_cast<size_t>(bs)) {
    return false;
  }
  // The graph computes one logits row per request, in order.
  for (int32_t b = 0; b < bs; ++b) {
    if (batch.logits_indices[b] != b) return false;
  }
  return true;
}

Status DecodeGraphRunner::stage(const mem::ForwardBatch& padded) {
  int32_t* host = staging_.get();
  auto* device = device_ints_.data_as<int32_t>();
  const int64_t head = mem::batch_ints_size(padded);
  mem::pack_batch_ints(padded, host);
  KV_ASSIGN_OR_RETURN(const int64_t plan,
                      backend_.init_forward_metadata_decode_graph(padded, host + head,
                                                                  capacity_ - head, device + head));
  platform_.copy(device, host, static_cast<size_t>(head + plan) * sizeof(int32_t),
                 platform::CopyKind::kHostToDevice, stream_);
  return Status::ok();
}

Status DecodeGraphRunner::replay(const mem::ForwardBatch& batch, std::vector<float>* logits,
                                 std::vector<int32_t>* tokens) {
  KV_RETURN_IF_ERROR(replay_queued(batch));
  const int32_t bs = batch.batch_size();
  if (tokens != nullptr) {
    tokens->resize(static_cast<size_t>(bs));
    platform_.copy(tokens->data(), model_.static_argmax(), tokens->size() * sizeof(int32_t),
                   platform::CopyKind::kDeviceToHost, stream_);
  }
  if (logits != nullptr) {
    logits->resize(static_cast<size_t>(bs) * model_.config().vocab_size);
    platform_.copy(logits->data(), model_.static_logits(), logits->size() * sizeof(float),
                   platform::CopyKind::kDeviceToHost, stream_);
  }
  platform_.synchronize_stream(stream_);
  return Status::ok();
}

Status DecodeGraphRunner::replay_queued(const mem::ForwardBatch& batch) {
  KV_CHECK(can_run(batch), "replay: a decode batch of 1..{} requests, got {}", max_bs(),
           batch.batch_size());
  const int32_t bs = batch.batch_size();
  const auto i =
      static_cast<size_t>(std::lower_bound(sizes_.begin(), sizes_.end(), bs) - sizes_.begin());
  // The staging buffer is rewritten here: the previous replay's copy from it was waited for by
  // its caller (replay, or the sampler's copy back).
  KV_RETURN_IF_ERROR(stage(pad_decode_batch(batch, sizes_[i])));
  graphs_[i].replay(stream_);
  ++replays_;
  return Status::ok();
}

std::string DecodeGraphRunner::summary() const {
  return fmt::format("captured {} decode graphs (bs {}..{}) in {:.2f} s, {:.1f} MiB", sizes_.size(),
                     sizes_.empty() ? 0 : sizes_.front(), max_bs(), capture_seconds_,
                     memory_bytes_ / (1024.0 * 1024.0));
}

}  // namespace kvserve::model
