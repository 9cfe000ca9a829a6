// cuda-ragged: attention on a CUDA platform by gathering each request's K/V slots into contiguous
// buffers, then one variable-length attention launch (seed 000's approach 2).
//
// It reads any row layout: token slots need no page alignment, so Whisper's ragged encoder layout
// (the decoder region starts right after encoder_len slots, inside a page) works, as do the
// aligned layout and decoder-only batches. Per layer: the layer's new K/V are stored at
// out_cache_loc (encoder_out_cache_loc for cross-attention K/V computed in this forward), one
// gather kernel copies the batch's slots (through req_to_token) of K and V into contiguous
// [total_kv, kv_heads, head_dim] buffers, and varlen_attention runs causal over the decoder region
// (query i of an extend of q_len tokens over kv_len positions sees kv_len - q_len + i + 1) or
// non-causal over the encoder region. Empty KV (every encoder_len 0): zeros, no launch.
// An fp8 pool is widened by the gather into bf16 rows (times the layer's scales): the varlen
// kernel never sees fp8.
//
// init_forward_metadata uploads the store slots, the rows and the cumulative query and key lengths
// (O(batch) integers, plus an extend's prefix slots for the req_to_token mirror) in one copy,
// writes the forward's rows into the mirror and builds the gather lists from it on the device.
#include <algorithm>
#include <span>

#include "kvserve/attention/cuda_backends.h"
#include "kvserve/attention/device_metadata.h"
#include "kvserve/platform/ops/varlen_attention.h"

namespace kvserve::attention {
namespace {

// One kind of attention's gather list: slots built on the device from the req_to_token mirror
// (page size 1 through ops::build_kv_indices), its indptr the cumulative key lengths.
struct GatherSet {
  KvIndexSet slots;
  int64_t total_kv = 0;
};

class CudaRaggedBackend final : public AttentionBackend {
 public:
  explicit CudaRaggedBackend(platform::Platform& p) : platform_(p), meta_(p, "cuda-ragged") {}

  std::string_view name() const override { return "cuda-ragged"; }
  const int32_t* device_out_cache_loc() const override { return meta_.device(loc_); }

  void init_forward_metadata(const model::ForwardBatch& batch) override {
    meta_.clear();
    mem::DeviceReqToToken* mirror = batch.req_to_token_device;
    KV_CHECK(mirror != nullptr, "cuda-ragged reads the batch's req_to_token mirror");
    const int32_t bs = batch.batch_size();
    loc_ = meta_.append(batch.out_cache_loc);
    encoder_loc_ = meta_.append(batch.encoder_out_cache_loc);
    const int64_t rows = meta_.append(batch.req_pool_indices);
    const MirrorWrite write = plan_mirror_write(batch, meta_, rows, loc_, MirrorWriteMode::kAll);
    std::vector<int32_t>& host = meta_.host();
    cu_q_ = meta_.size();
    host.push_back(0);
    max_q_len_ = 0;
    for (int32_t b = 0; b < bs; ++b) {
      host.push_back(host.back() + batch.extend_lens[b]);
      max_q_len_ = std::max(max_q_len_, batch.extend_lens[b]);
    }
    KV_CHECK_EQ(host.back(), batch.num_tokens(), "extend_lens must cover the batch's tokens");

    std::vector<int32_t> self_starts(bs), self_lens(bs), cross_lens(bs);
    for (int32_t b = 0; b < bs; ++b) {
      self_starts[b] = batch.kv_start(b);
      self_lens[b] = batch.seq_lens[b];
      cross_lens[b] = batch.encoder_len(b);
    }
    int64_t index_size = 0;
    self_ = add_ranges(self_starts, self_lens, &index_size);
    cross_ = add_ranges({}, cross_lens, &index_size);
    meta_.upload();

    // Device work before the first layer: the mirror write, then the gather lists from it.
    const int32_t* meta = meta_.device();
    write_mirror(platform_, *mirror, write, meta);
    reserve(index_, static_cast<size_t>(index_size) * sizeof(int32_t), "slot list");
    for (const GatherSet* g : {&self_, &cross_}) {
      if (g->total_kv == 0) continue;
      build_kv_indices(platform_, *mirror, g->slots, bs, /*page_size=*/1, meta, rows,
                       index_.data_as<int32_t>());
    }
  }

  void forward_extend(const AttentionIO& io, const AttentionLayer& layer,
                      const model::ForwardBatch& batch, bool save_kv) override {
    run(io, layer, batch, save_kv);
  }
  void forward_decode(const AttentionIO& io, const AttentionLayer& layer,
                      const model::ForwardBatch& batch, bool save_kv) override {
    run(io, layer, batch, save_kv);
  }

 private:
  GatherSet add_ranges(std::span<const int32_t> starts, std::span<const int32_t> lens,
                       int64_t* index_size) {
    GatherSet g;
    g.slots = plan_kv_indices(meta_, starts, lens, /*page_size=*/1, index_size, indptr_);
    g.total_kv = g.slots.entries;
    return g;
  }

  // Grows `buf` to at least `bytes` (contents are not kept).
  void reserve(Buffer& buf, size_t bytes, const char* what) {
    if (bytes <= buf.bytes()) return;
    buf = Buffer();
    auto grown = platform_.allocate_buffer(bytes);
    KV_CHECK(grown.is_ok(), "cuda-ragged {} buffer of {} bytes: {}", what, bytes,
             grown.status().to_string());
    buf = std::move(*grown);
  }

  void run(const AttentionIO& io, const AttentionLayer& layer, const model::ForwardBatch& batch,
           bool save_kv) {
    mem::MHATokenToKVPool& pool = *batch.kv_pool;
    const DType kv_dtype = pool.config().dtype;
    // The gather copies the cache as it is, or widens an fp8 cache into bf16 rows (times the
    // layer's scales), so the varlen kernel always reads the queries' dtype.
    KV_CHECK(io.dtype == kv_dtype || (is_float8(kv_dtype) && io.dtype == DType::kBF16),
             "cuda-ragged: queries {} over a {} KV cache (the same dtype, or bf16 over fp8)",
             dtype_name(io.dtype), dtype_name(kv_dtype));
    const int32_t* meta = meta_.device();
    if (save_kv) {
      store_kv_from_device(platform_, io, layer, batch, meta + loc_, meta + encoder_loc_);
    }
    const GatherSet& g = layer.is_cross_attention ? cross_ : self_;
    const int64_t q_width = static_cast<int64_t>(layer.num_heads) * layer.head_dim;
    if (g.total_kv == 0) {
      // The empty-KV guard: zeros, no kernel.
      platform_.memset(io.out, 0, batch.num_tokens() * q_width * dtype_size(io.dtype));
      return;
    }
    const int64_t kv_width = static_cast<int64_t>(layer.num_kv_heads) * layer.head_dim;
    const size_t bytes = g.total_kv * kv_width * dtype_size(io.dtype);
    reserve(k_gathered_, bytes, "K");
    reserve(v_gathered_, bytes, "V");
    const TensorView kc = pool.k_buffer(layer.layer_id);
    ops::gather_kv(platform_, {.k_cache = kc.data(),
                               .v_cache = pool.v_buffer(layer.layer_id).data(),
                               .slots = index_.data_as<const int32_t>() + g.slots.out,
                               .k_out = k_gathered_.data(),
                               .v_out = v_gathered_.data(),
                               .dtype = io.dtype,
                               .cache_dtype = kv_dtype,
                               .k_scale = pool.k_scale(layer.layer_id),
                               .v_scale = pool.v_scale(layer.layer_id),
                               .num_tokens = g.total_kv,
                               .row_elems = kv_width,
                               .num_slots = kc.dim(0)});
    ops::varlen_attention(platform_, {.q = io.q,
                                      .k = k_gathered_.data(),
                                      .v = v_gathered_.data(),
                                      .out = io.out,
                                      .cu_q = meta + cu_q_,
                                      .cu_kv = meta + g.slots.indptr,
                                      .dtype = io.dtype,
                                      .num_seqs = batch.batch_size(),
                                      .max_q_len = max_q_len_,
                                      .q_stride = q_width,
                                      .k_stride = kv_width,
                                      .v_stride = kv_width,
                                      .out_stride = q_width,
                                      .num_heads = layer.num_heads,
                                      .num_kv_heads = layer.num_kv_heads,
                                      .head_dim = layer.head_dim,
                                      .scaling = layer.scaling,
                                      .causal = !layer.is_cross_attention});
  }

  platform::Platform& platform_;
  DeviceMetadata meta_;
  std::vector<int32_t> indptr_;
  Buffer index_;  // the gather lists, built on the device, grown on demand
  Buffer k_gathered_;
  Buffer v_gathered_;
  int64_t loc_ = 0;
  int64_t encoder_loc_ = 0;
  int64_t cu_q_ = 0;
  int32_t max_q_len_ = 0;
  GatherSet self_;
  GatherSet cross_;
};

}  // namespace

std::unique_ptr<AttentionBackend> make_cuda_ragged_backend(platform::Platform& platform) {
  return std::make_unique<CudaRaggedBackend>(platform);
}

}  // namespace kvserve::attention
