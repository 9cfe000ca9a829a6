// cuda-paged: attention over the paged pool on a CUDA platform, in place through page ids.
//
// Extend batches with more query tokens than requests run the tensor-core paged prefill kernel
// (platform/cuda/paged_prefill.cu): request b's new tokens are rows [qo_indptr[b],
// qo_indptr[b + 1]) and the token at decoder position p sees p + 1 positions (causal; the cached
// prefix included); cross-attention runs it with causal = false over the encoder region.
// Decode batches (and extends of one token per request) run the paged decode kernel
// (platform/cuda/paged_decode.cu), every query token one "query" over its request's shared page
// list up to its visible length: decode seq_len, extend p + 1, cross the encoder region.
// CudaPagedOptions::prefill_kernel = false keeps the decode kernel for extends too (tests compare
// the two paths).
//
// init_forward_metadata builds the page lists, per-request qo_indptr / kv_lens (prefill) or
// per-query starts and lengths (decode) and the store slots on the host once per forward and
// uploads them in one copy; every layer reuses them.
#include <fmt/format.h>

#include <algorithm>

#include "kvserve/attention/cuda_backends.h"
#include "kvserve/mem/page_table.h"
#include "kvserve/platform/ops/paged_decode.h"
#include "kvserve/platform/ops/paged_prefill.h"

namespace kvserve::attention {
namespace {

// Offsets (in int32 elements) of one forward's metadata inside the device buffer.
struct QuerySet {
  int64_t page_ids = 0;  // the requests' page lists, concatenated
  int64_t starts = 0;    // [num_queries] where each query's page list begins
  int64_t lens = 0;      // [num_queries] visible KV positions
  int32_t num_queries = 0;
  int32_t max_len = 0;
  int64_t total_kv = 0;
  // Prefill kernel (per request): page lists, where each starts, positions visible to the last
  // query; queries are rows of the forward's qo_indptr.
  bool prefill = false;
  int64_t page_indptr = 0;  // [batch + 1]
  int64_t kv_lens = 0;      // [batch]
};

class CudaPagedBackend final : public AttentionBackend {
 public:
  CudaPagedBackend(platform::Platform& p, CudaPagedOptions options)
      : platform_(p), options_(options), num_sms_(ops::num_compute_units(p)) {}

  std::string_view name() const override { return "cuda-paged"; }

  void init_forward_metadata(const model::ForwardBatch& batch) override {
    host_.clear();
    const int32_t bs = batch.batch_size();
    const int32_t ps = batch.kv_pool->config().page_size;
    // Store slots first: decoder tokens, then encoder tokens computed in this forward.
    loc_ = append(batch.out_cache_loc);
    encoder_loc_ = append(batch.encoder_out_cache_loc);

    std::vector<mem::KvRange> self(bs), cross(bs);
    bool any_cross = false;
    for (int32_t b = 0; b < bs; ++b) {
      self[b] = {batch.req_pool_indices[b], batch.kv_start(b), batch.seq_lens[b]};
      cross[b] = {batch.req_pool_indices[b], 0, batch.encoder_len(b)};
      any_cross = any_cross || batch.encoder_len(b) > 0;
    }
    // Many queries per request: tiles of queries share each K/V load on tensor cores.
    const bool prefill =
        options_.prefill_kernel && !batch.is_decode() && batch.num_tokens() > batch.batch_size();
    if (prefill) {
      qo_indptr_ = append(batch.extend_start_loc);
      host_.push_back(batch.num_tokens());
      for (int32_t b = 0; b < bs; ++b) {
        // The kernel's causal rule (query i sees seq_len - extend_len + i + 1 positions) is the
        // decoder position's p + 1.
        for (int32_t i = 0; i < batch.extend_lens[b]; ++i) {
          const int32_t t = batch.extend_start_loc[b] + i;
          KV_CHECK(batch.positions[t] == batch.seq_lens[b] - batch.extend_lens[b] + i,
                   "token {} at position {} of a request with {} of {} positions new", t,
                   batch.positions[t], batch.extend_lens[b], batch.seq_lens[b]);
        }
      }
    }
    auto add = [&](const std::vector<mem::KvRange>& ranges, bool causal) {
      return prefill ? add_requests(batch, ranges, ps) : add_queries(batch, ranges, ps, causal);
    };
    self_ = add(self, /*causal=*/true);
    cross_ = any_cross || !batch.encoder_lens.empty() ? add(cross, false) : QuerySet{};

    const size_t bytes = host_.size() * sizeof(int32_t);
    if (bytes > device_meta_.bytes()) {
      auto buf = platform_.allocate_buffer(std::max(bytes, device_meta_.bytes() * 2));
      KV_CHECK(buf.is_ok(), "cuda-paged metadata: {}", buf.status().to_string());
      device_meta_ = std::move(*buf);
    }
    platform_.copy(device_meta_.data(), host_.data(), bytes, platform::CopyKind::kHostToDevice);
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
  int64_t append(const std::vector<int32_t>& v) {
    const auto at = static_cast<int64_t>(host_.size());
    host_.insert(host_.end(), v.begin(), v.end());
    return at;
  }

  // Prefill kernel metadata: each request's page list, indptr and KV length.
  QuerySet add_requests(const model::ForwardBatch& batch, const std::vector<mem::KvRange>& ranges,
                        int32_t ps) {
    mem::build_kv_indices(*batch.req_to_token, ranges, mem::IndexUnit::kPage, ps, indices_);
    QuerySet q;
    q.prefill = true;
    q.total_kv = indices_.total_kv();
    q.num_queries = batch.num_tokens();
    q.page_ids = append(indices_.indices);
    q.page_indptr = append(indices_.indptr);
    q.kv_lens = append(indices_.kv_lens);
    for (const int32_t len : indices_.kv_lens)
      q.max_len = std::max(q.max_len, len);
    return q;
  }

  QuerySet add_queries(const model::ForwardBatch& batch, const std::vector<mem::KvRange>& ranges,
                       int32_t ps, bool causal) {
    mem::build_kv_indices(*batch.req_to_token, ranges, mem::IndexUnit::kPage, ps, indices_);
    QuerySet q;
    q.total_kv = indices_.total_kv();
    q.page_ids = append(indices_.indices);
    const int32_t n = batch.num_tokens();
    q.num_queries = n;
    q.starts = static_cast<int64_t>(host_.size());
    host_.resize(host_.size() + 2 * static_cast<size_t>(n));
    q.lens = q.starts + n;
    for (int32_t b = 0; b < batch.batch_size(); ++b) {
      for (int32_t i = 0; i < batch.extend_lens[b]; ++i) {
        const int32_t t = batch.extend_start_loc[b] + i;
        // Decoder positions count from the start of the decoder region.
        const int32_t visible = causal ? batch.positions[t] + 1 : ranges[b].len;
        KV_CHECK(visible <= ranges[b].len, "token {} sees {} of {} positions", t, visible,
                 ranges[b].len);
        host_[q.starts + t] = indices_.indptr[b];
        host_[q.lens + t] = visible;
        q.max_len = std::max(q.max_len, visible);
      }
    }
    return q;
  }

  void run(const AttentionIO& io, const AttentionLayer& layer, const model::ForwardBatch& batch,
           bool save_kv) {
    mem::MHATokenToKVPool& pool = *batch.kv_pool;
    const Device dev = platform_.device();
    KV_CHECK(io.dtype == DType::kBF16 && pool.config().dtype == DType::kBF16,
             "cuda-paged reads bf16 queries and a bf16 KV cache (got {} / {})",
             dtype_name(io.dtype), dtype_name(pool.config().dtype));
    auto* meta = device_meta_.data_as<int32_t>();
    if (save_kv && io.k != nullptr) {
      const bool cross = layer.is_cross_attention;
      const auto n = static_cast<int64_t>(cross ? batch.encoder_out_cache_loc.size()
                                                : batch.out_cache_loc.size());
      if (n > 0) {
        const TensorView loc(meta + (cross ? encoder_loc_ : loc_), DType::kI32, {n}, dev);
        const TensorView k(const_cast<void*>(io.k), io.dtype,
                           {n, layer.num_kv_heads, layer.head_dim}, dev);
        const TensorView v(const_cast<void*>(io.v), io.dtype,
                           {n, layer.num_kv_heads, layer.head_dim}, dev);
        pool.set_kv_buffer(layer.layer_id, loc, k, v);
      }
    }
    const QuerySet& qs = layer.is_cross_attention ? cross_ : self_;
    const size_t out_bytes = static_cast<size_t>(batch.num_tokens()) * layer.num_heads *
                             layer.head_dim * dtype_size(io.dtype);
    if (qs.total_kv == 0) {
      // The empty-KV guard: zeros, no kernel.
      platform_.memset(io.out, 0, out_bytes);
      return;
    }
    if (qs.prefill) {
      const ops::PagedPrefillParams p{
          .q = io.q,
          .k_cache = pool.k_buffer(layer.layer_id).data(),
          .v_cache = pool.v_buffer(layer.layer_id).data(),
          .qo_indptr = meta + qo_indptr_,
          .page_indptr = meta + qs.page_indptr,
          .page_ids = meta + qs.page_ids,
          .kv_lens = meta + qs.kv_lens,
          .out = io.out,
          .batch = batch.batch_size(),
          .total_q = batch.num_tokens(),
          .num_q_heads = layer.num_heads,
          .num_kv_heads = layer.num_kv_heads,
          .head_dim = layer.head_dim,
          .page_size = pool.config().page_size,
          .causal = !layer.is_cross_attention,
          .sm_scale = layer.scaling,
      };
      ops::paged_prefill(platform_, p);
      return;
    }
    const ops::PagedDecodePlan plan = ops::plan_paged_decode(
        qs.num_queries, layer.num_heads, layer.num_kv_heads, layer.head_dim, qs.max_len, num_sms_);
    if (plan.workspace_floats * sizeof(float) > workspace_.bytes()) {
      auto buf = platform_.allocate_buffer(plan.workspace_floats * sizeof(float));
      KV_CHECK(buf.is_ok(), "cuda-paged split workspace: {}", buf.status().to_string());
      workspace_ = std::move(*buf);
    }
    auto* ws = workspace_.data_as<float>();
    const size_t partial = plan.workspace_floats / (static_cast<size_t>(layer.head_dim) + 1) *
                           static_cast<size_t>(layer.head_dim);
    ops::PagedDecodeParams p{
        .q = io.q,
        .k_cache = pool.k_buffer(layer.layer_id).data(),
        .v_cache = pool.v_buffer(layer.layer_id).data(),
        .page_indptr = meta + qs.starts,
        .page_ids = meta + qs.page_ids,
        .seq_lens = meta + qs.lens,
        .out = io.out,
        .partial_out = plan.num_splits > 1 ? ws : nullptr,
        .partial_lse = plan.num_splits > 1 ? ws + partial : nullptr,
        .batch = qs.num_queries,
        .num_q_heads = layer.num_heads,
        .num_kv_heads = layer.num_kv_heads,
        .head_dim = layer.head_dim,
        .page_size = pool.config().page_size,
        .num_splits = plan.num_splits,
        .tokens_per_split = plan.tokens_per_split,
        .sm_scale = layer.scaling,
    };
    ops::paged_decode(platform_, p);
  }

  platform::Platform& platform_;
  CudaPagedOptions options_;
  int32_t num_sms_ = 1;
  std::vector<int32_t> host_;
  mem::KvIndices indices_;
  Buffer device_meta_;
  Buffer workspace_;
  int64_t loc_ = 0;
  int64_t encoder_loc_ = 0;
  int64_t qo_indptr_ = 0;  // [batch + 1] when the prefill kernel runs
  QuerySet self_;
  QuerySet cross_;
};

}  // namespace

std::unique_ptr<AttentionBackend> make_cuda_paged_backend(platform::Platform& platform,
                                                          CudaPagedOptions options) {
  return std::make_unique<CudaPagedBackend>(platform, options);
}

}  // namespace kvserve::attention
