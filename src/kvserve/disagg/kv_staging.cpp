#include "kvserve/disagg/kv_staging.h"

#include <cstring>

#include "kvserve/platform/ops/kv_staging.h"

namespace kvserve::disagg {

uint64_t StagingFormat::token_bytes() const {
  return 2ull * static_cast<uint64_t>(num_layers) * static_cast<uint64_t>(num_heads) *
         static_cast<uint64_t>(head_dim) * dtype_size(dtype);
}

Status KvStager::check(const mem::MHATokenToKVPool& pool, const StagingFormat& format,
                       int32_t head_begin, int64_t max_tokens) {
  const mem::KvPoolConfig& c = pool.config();
  if (format.num_layers != c.num_layers || format.head_dim != c.head_dim) {
    return invalid_argument(
        "KV staging: the format has {} layers of head_dim {}, the pool {} of head_dim {}",
        format.num_layers, format.head_dim, c.num_layers, c.head_dim);
  }
  if (format.num_heads <= 0 || head_begin < 0 || head_begin + format.num_heads > c.num_kv_heads) {
    return invalid_argument("KV staging: heads [{}, {}) outside the pool's {} KV heads", head_begin,
                            head_begin + format.num_heads, c.num_kv_heads);
  }
  if (!ops::kv_staging_converts(c.dtype, format.dtype)) {
    return invalid_argument(
        "KV staging: cannot convert the pool's {} to a {} staging region (equal dtypes, or "
        "f32/f16/bf16 on both sides)",
        dtype_name(c.dtype), dtype_name(format.dtype));
  }
  if (max_tokens <= 0 || max_tokens > (int64_t{1} << 31) - 1) {
    return invalid_argument("KV staging: {} tokens per chunk", max_tokens);
  }
  return Status::ok();
}

Status KvStager::init_queue() {
  platform::Platform& p = *platform_;
  const size_t slots_bytes = static_cast<size_t>(max_tokens_) * sizeof(int32_t);
  KV_ASSIGN_OR_RETURN(host_slots_, p.allocate_host(slots_bytes));
  KV_ASSIGN_OR_RETURN(device_slots_, p.allocate_buffer(slots_bytes));
  stream_ = p.create_stream();
  done_ = p.create_event();
  return Status::ok();
}

Result<std::unique_ptr<KvStager>> KvStager::create(mem::MHATokenToKVPool& pool,
                                                   const StagingFormat& format, int32_t head_begin,
                                                   int64_t max_tokens, StagingMemory memory) {
  KV_RETURN_IF_ERROR(check(pool, format, head_begin, max_tokens));
  std::unique_ptr<KvStager> s(new KvStager(pool, format, head_begin, max_tokens, memory));
  platform::Platform& p = *s->platform_;
  s->staging_bytes_ = format.bytes(max_tokens);
  if (memory == StagingMemory::kPinnedHost || p.device().is_cpu()) {
    KV_ASSIGN_OR_RETURN(s->staging_, p.allocate_host(s->staging_bytes_));
  } else {
    KV_ASSIGN_OR_RETURN(s->device_staging_, p.allocate_buffer(s->staging_bytes_));
    s->staging_ = s->device_staging_.data();
    s->staging_on_device_ = true;
  }
  KV_RETURN_IF_ERROR(s->init_queue());
  return s;
}

Result<std::unique_ptr<KvStager>> KvStager::create(mem::MHATokenToKVPool& pool,
                                                   const StagingFormat& format, int32_t head_begin,
                                                   int64_t max_tokens,
                                                   const StagingRegion& region) {
  KV_RETURN_IF_ERROR(check(pool, format, head_begin, max_tokens));
  if (region.base == nullptr || region.bytes == 0) {
    return invalid_argument("KV staging: an empty staging region");
  }
  if (region.device && pool.platform().device().is_cpu()) {
    return invalid_argument("KV staging: a device staging region for a CPU pool");
  }
  std::unique_ptr<KvStager> s(
      new KvStager(pool, format, head_begin, max_tokens,
                   region.device ? StagingMemory::kDevice : StagingMemory::kPinnedHost));
  s->staging_ = region.base;
  s->staging_bytes_ = region.bytes;
  s->owned_ = false;
  s->staging_on_device_ = region.device;
  KV_RETURN_IF_ERROR(s->init_queue());
  return s;
}

KvStager::KvStager(mem::MHATokenToKVPool& pool, const StagingFormat& format, int32_t head_begin,
                   int64_t max_tokens, StagingMemory memory)
    : pool_(&pool),
      platform_(&pool.platform()),
      format_(format),
      head_begin_(head_begin),
      max_tokens_(max_tokens),
      memory_(memory) {}

KvStager::~KvStager() {
  if (stream_.ptr != nullptr) platform_->synchronize_stream(stream_);
  if (done_.ptr != nullptr) platform_->destroy_event(done_);
  if (stream_.ptr != nullptr) platform_->destroy_stream(stream_);
  const size_t slots_bytes = static_cast<size_t>(max_tokens_) * sizeof(int32_t);
  if (host_slots_ != nullptr) platform_->deallocate_host(host_slots_, slots_bytes);
  if (owned_ && staging_ != nullptr && device_staging_.empty()) {
    platform_->deallocate_host(staging_, staging_bytes_);
  }
}

Device KvStager::staging_device() const {
  return staging_on_device_ ? platform_->device() : Device{};
}

Result<platform::EventHandle> KvStager::gather(std::span<const int32_t> slots,
                                               platform::EventHandle after, uint64_t offset) {
  return run(slots, after, offset, /*scatter=*/false);
}

Result<platform::EventHandle> KvStager::scatter(std::span<const int32_t> slots,
                                                platform::EventHandle after, uint64_t offset) {
  return run(slots, after, offset, /*scatter=*/true);
}

Result<platform::EventHandle> KvStager::run(std::span<const int32_t> slots,
                                            platform::EventHandle after, uint64_t offset,
                                            bool scatter) {
  if (static_cast<int64_t>(slots.size()) > max_tokens_) {
    return invalid_argument("KV staging: {} tokens in a chunk of at most {}", slots.size(),
                            max_tokens_);
  }
  const uint64_t chunk = format_.bytes(static_cast<int64_t>(slots.size()));
  if (offset > staging_bytes_ || chunk > staging_bytes_ - offset) {
    return invalid_argument("KV staging: {} bytes at offset {} outside the {}-byte region", chunk,
                            offset, staging_bytes_);
  }
  const int64_t pool_slots = pool_->num_slots();
  for (size_t i = 0; i < slots.size(); ++i) {
    if (slots[i] < 0 || slots[i] >= pool_slots) {
      return invalid_argument("KV staging: token {}'s slot {} outside the pool's {} slots", i,
                              slots[i], pool_slots);
    }
  }
  platform::Platform& p = *platform_;
  // The pinned slot list and the staging region are reused: the previous chunk must be done.
  if (in_flight_) p.synchronize_event(done_);
  if (after.ptr != nullptr) p.stream_wait_event(stream_, after);
  std::memcpy(host_slots_, slots.data(), slots.size_bytes());
  p.copy(device_slots_.data(), host_slots_, slots.size_bytes(),
         p.device().is_cpu() ? platform::CopyKind::kHostToHost : platform::CopyKind::kHostToDevice,
         stream_);
  const mem::KvPoolConfig& c = pool_->config();
  const auto infos = pool_->get_contiguous_buf_infos();
  ops::KvStagingParams op;
  op.pool = infos.front().ptr;
  op.buffer_stride = infos.size() > 1 ? static_cast<int64_t>(static_cast<uint8_t*>(infos[1].ptr) -
                                                             static_cast<uint8_t*>(infos[0].ptr))
                                      : 0;
  op.pool_slots = pool_slots;
  op.num_layers = c.num_layers;
  op.pool_heads = c.num_kv_heads;
  op.head_dim = c.head_dim;
  op.pool_dtype = c.dtype;
  op.head_begin = head_begin_;
  op.num_heads = format_.num_heads;
  op.staging = static_cast<uint8_t*>(staging_) + offset;
  op.staging_dtype = format_.dtype;
  op.slots = device_slots_.data_as<const int32_t>();
  op.num_tokens = static_cast<int32_t>(slots.size());
  op.scatter = scatter;
  ops::kv_staging(p, op, stream_);
  p.record_event(done_, stream_);
  in_flight_ = true;
  return done_;
}

}  // namespace kvserve::disagg
