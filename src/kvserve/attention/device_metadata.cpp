#include "kvserve/attention/device_metadata.h"

#include <algorithm>
#include <cstring>

#include "kvserve/platform/ops/req_to_token.h"

namespace kvserve::attention {

int64_t DeviceMetadata::append(std::span<const int32_t> values) {
  const auto at = static_cast<int64_t>(host_.size());
  host_.insert(host_.end(), values.begin(), values.end());
  return at;
}

int64_t DeviceMetadata::append_zeros(int64_t n) {
  const auto at = static_cast<int64_t>(host_.size());
  host_.resize(host_.size() + static_cast<size_t>(n), 0);
  return at;
}

Status DeviceMetadata::upload() {
  const size_t bytes = host_.size() * sizeof(int32_t);
  if (bytes > buffer_.bytes() || buffer_.empty()) {
    auto grown = platform_.allocate_buffer(std::max({bytes, buffer_.bytes() * 2, size_t{256}}));
    if (!grown.is_ok()) {
      return make_status(grown.status().code(), "{} metadata of {} bytes: {}", owner_, bytes,
                         grown.status().message());
    }
    buffer_ = std::move(*grown);
  }
  platform_.copy(buffer_.data(), host_.data(), bytes, platform::CopyKind::kHostToDevice);
  device_ = buffer_.data_as<const int32_t>();
  return Status::ok();
}

int64_t DeviceMetadata::stage(int32_t* host, int64_t capacity, const int32_t* device) {
  const int64_t n = size();
  KV_CHECK(n <= capacity, "{} graph metadata: {} integers for a buffer of {}", owner_, n, capacity);
  std::memcpy(host, host_.data(), static_cast<size_t>(n) * sizeof(int32_t));
  device_ = device;
  return n;
}

MirrorWrite plan_mirror_write(const mem::ForwardBatch& batch, DeviceMetadata& meta, int64_t rows,
                              int64_t loc, MirrorWriteMode mode) {
  const mem::DeviceReqToToken* mirror = batch.req_to_token_device;
  KV_CHECK(mirror != nullptr, "a device attention backend needs the batch's req_to_token mirror");
  // (A decode graph's capture batch is all padding and has no host table.)
  KV_CHECK(batch.req_to_token == nullptr || mirror->mirrors(*batch.req_to_token),
           "the mirror of another req_to_token table");
  const int32_t bs = batch.batch_size();
  MirrorWrite w;
  w.batch = bs;
  w.rows = rows;
  w.new_slots = loc;
  std::vector<int32_t>& ints = meta.host();
  // Where each request's new slots go: its first computed position, in row coordinates.
  w.new_start = meta.append_zeros(bs);
  for (int32_t b = 0; b < bs; ++b)
    ints[w.new_start + b] = batch.kv_start(b) + batch.seq_lens[b] - batch.extend_lens[b];
  w.new_indptr = meta.append_zeros(bs + 1);
  if (mode != MirrorWriteMode::kPrefixOnly) {
    for (int32_t b = 0; b < bs; ++b)
      ints[w.new_indptr + b] = batch.extend_start_loc[b];
    ints[w.new_indptr + bs] = batch.num_tokens();
  }
  if (mode == MirrorWriteMode::kNewOnly) return w;

  // The host rows' rewrites, as the batch builder took them.
  const mem::ForwardBatch::RowRewrites& rw = batch.row_rewrites;
  KV_CHECK(rw.start.size() == static_cast<size_t>(bs) &&
               rw.indptr.size() == static_cast<size_t>(bs) + 1 &&
               static_cast<size_t>(rw.indptr.back()) == rw.slots.size(),
           "row_rewrites of {} requests for a batch of {}", rw.start.size(), bs);
  w.prefix_start = meta.append(rw.start);
  w.prefix_indptr = meta.append(rw.indptr);
  w.prefix_slots = meta.append(rw.slots);
  if (mode == MirrorWriteMode::kPrefixOnly && rw.slots.empty()) w.batch = 0;
  return w;
}

void write_mirror(platform::Platform& platform, mem::DeviceReqToToken& mirror, const MirrorWrite& w,
                  const int32_t* meta) {
  if (w.batch == 0) return;
  ops::write_req_to_token(platform,
                          {.table = mirror.data(),
                           .stride = mirror.stride(),
                           .table_rows = mirror.rows(),
                           .rows = meta + w.rows,
                           .prefix_indptr = w.prefix_indptr < 0 ? nullptr : meta + w.prefix_indptr,
                           .prefix_start = w.prefix_indptr < 0 ? nullptr : meta + w.prefix_start,
                           .prefix_slots = w.prefix_indptr < 0 ? nullptr : meta + w.prefix_slots,
                           .new_indptr = meta + w.new_indptr,
                           .new_start = meta + w.new_start,
                           .new_slots = meta + w.new_slots,
                           .batch = w.batch});
}

KvIndexSet plan_kv_indices(DeviceMetadata& meta, std::span<const int32_t> starts,
                           std::span<const int32_t> lens, int32_t page_size, int64_t* out_size,
                           std::vector<int32_t>& indptr) {
  KvIndexSet set;
  indptr.assign(lens.size() + 1, 0);
  for (size_t b = 0; b < lens.size(); ++b) {
    KV_CHECK(starts.empty() || starts[b] % page_size == 0,
             "request {}: range at position {} starts mid-page (page size {})", b, starts[b],
             page_size);
    indptr[b + 1] = indptr[b] + (lens[b] + page_size - 1) / page_size;
  }
  if (!starts.empty()) set.starts = meta.append(starts);
  set.indptr = meta.append(indptr);
  set.entries = indptr.back();
  set.out = *out_size;
  *out_size += set.entries;
  return set;
}

void build_kv_indices(platform::Platform& platform, const mem::DeviceReqToToken& mirror,
                      const KvIndexSet& set, int32_t batch, int32_t page_size, const int32_t* meta,
                      int64_t rows, int32_t* out) {
  ops::build_kv_indices(platform, {.table = mirror.data(),
                                   .stride = mirror.stride(),
                                   .table_rows = mirror.rows(),
                                   .rows = meta + rows,
                                   .starts = set.starts < 0 ? nullptr : meta + set.starts,
                                   .indptr = meta + set.indptr,
                                   .out = out + set.out,
                                   .batch = batch,
                                   .page_size = page_size});
}

}  // namespace kvserve::attention
