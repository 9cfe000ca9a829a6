// cuda-paged: attention over the paged pool on a CUDA platform, in place through page ids; and
// cuda-ragged, the same backend with a gather in front (seed 000's approach 2).
//
// Extend batches with more query tokens than requests run the tensor-core paged prefill kernel
// (platform/cuda/paged_prefill.cu): request b's new tokens are rows [qo_indptr[b],
// qo_indptr[b + 1]) and the token at decoder position p sees p + 1 positions (causal; the cached
// prefix included); cross-attention runs it with causal = false over the encoder region.
// Decode batches (and extends of one token per request) run a paged decode kernel, every query
// token one "query" over its request's shared page list up to its visible length: decode
// seq_len, extend p + 1, cross the encoder region. The tensor-core one (ops::paged_decode_tc,
// platform/cuda/paged_prefill.cu: 85-104 % of the byte roofline at batch >= 64 on the H200)
// where it applies, else the CUDA-core one (platform/cuda/paged_decode.cu; CudaPagedOptions::
// decode_tc = false or the platform's KernelSwitches::decode_tc choose it everywhere). Both take
// the same params and workspace layout, so the plan and the metadata do not depend on the choice.
// CudaPagedOptions::prefill_kernel = false keeps the decode kernel for extends too (tests compare
// the two paths).
// The pool may hold bf16 or fp8 (e4m3 / e5m2) K/V: every kernel reads the stored elements (fp8:
// half the bytes) and applies the layer's scales itself (value = stored * scale).
//
// init_forward_metadata uploads the forward's O(batch) integers (store slots, rows, page indptr,
// qo_indptr / kv_lens for prefill or per-query starts and lengths for decode; an extend adds its
// prefix slots for the req_to_token mirror) in one copy, then, on the same stream before the first
// layer, writes the forward's rows into the mirror (ops::write_req_to_token) and builds every
// request's page list from it (ops::build_kv_indices); every layer reuses them, and the split-KV
// plan made at the first layer. A decode batch's integers have offsets fixed by the batch size:
// decode graphs stage the same plan into a caller's fixed buffer
// (init_forward_metadata_decode_graph) and capture the mirror write and the page-list build
// (launch_decode_graph_metadata) into a fixed page-id buffer; they split for the longest possible
// request, which cuts every request as the eager plan does (per-request splits,
// ops/paged_decode.h).
//
// cuda-ragged (CudaPagedOptions::gather): the page lists are token slot lists (page size 1, any
// row layout: Whisper's ragged encoder region ends inside a page), and each layer first gathers
// its slots' K/V bytes (fp8 as stored) into contiguous buffers, then runs the same kernels in their
// contiguous mode (paged_decode_params.h: page_ids null, row = indptr + position). The kernels, the
// tiles and the split plans are the in-place read's, so cuda-ragged's output equals cuda-paged's
// bit for bit; what it adds is the gather's copy, every layer of every forward, and no decode
// graphs (the gathered size depends on the batch). Head dims the paged kernels lack (16, 32: test
// presets) attend with the CUDA-core varlen kernel over the same gathered rows instead.
// Every kernel takes the layer's sliding window and soft-cap (AttentionLayer::window_left,
// logit_softcap); the decode split plan is made over the window's length.
#include <fmt/format.h>

#include <algorithm>
#include <optional>
#include <span>
#include <string_view>
#include <tuple>

#include "kvserve/attention/capabilities.h"
#include "kvserve/attention/cuda_backends.h"
#include "kvserve/attention/device_metadata.h"
#include "kvserve/platform/ops/paged_decode.h"
#include "kvserve/platform/ops/paged_prefill.h"
#include "kvserve/platform/ops/varlen_attention.h"

namespace kvserve::attention {
namespace {

// Offsets (in int32 elements) of one forward's metadata inside its device copy; page ids are in
// the backend's index buffer, built on the device from the req_to_token mirror.
struct QuerySet {
  KvIndexSet pages;    // the requests' page lists (device-built), with their indptr
  int64_t starts = 0;  // [num_queries] where each query's page list begins
  int64_t lens = 0;    // [num_queries] visible KV positions
  int32_t num_queries = 0;
  int32_t max_len = 0;
  int64_t total_kv = 0;
  // Prefill kernel (per request): page lists, where each starts, positions visible to the last
  // query; queries are rows of the forward's qo_indptr.
  bool prefill = false;
  int64_t kv_lens = 0;  // [batch]
};

class CudaPagedBackend final : public AttentionBackend {
 public:
  CudaPagedBackend(platform::Platform& p, CudaPagedOptions options)
      : platform_(p),
        options_(options),
        num_sms_(ops::num_compute_units(p)),
        meta_(p, options.gather ? "cuda-ragged" : "cuda-paged"),
        repair_(p, "cuda-paged mirror") {}

  std::string_view name() const override { return options_.gather ? "cuda-ragged" : "cuda-paged"; }
  // The layers' new K/V are stored by the caller, through the slots already on the device
  // (CausalLM fuses the store into split_qkv_rope; others call attention::store_kv).
  KvStore kv_store() const override { return KvStore::kCaller; }
  const int32_t* store_slots(bool cross) const override {
    return meta_.device(cross ? encoder_loc_ : loc_);
  }

  Status init_forward_metadata(const mem::ForwardBatch& batch) override {
    build(batch, /*graph=*/false);
    graph_ = false;
    KV_RETURN_IF_ERROR(meta_.upload());
    return launch_device_metadata();
  }

  bool supports_decode_graphs() const override { return !options_.gather; }

  Result<int64_t> init_decode_graph_state(const DecodeGraphShape& shape) override {
    if (shape.max_bs < 1 || shape.max_kv_len < 1 || shape.page_size < 1) {
      return invalid_argument("cuda-paged decode graphs: batch {}, {} positions, page size {}",
                              shape.max_bs, shape.max_kv_len, shape.page_size);
    }
    graph_max_kv_len_ = shape.max_kv_len;
    // The split workspace for the batch size that needs the most (smaller batches split more).
    size_t floats = 0;
    size_t counters = 0;
    for (int32_t bs = 1; bs <= shape.max_bs; ++bs) {
      const ops::PagedDecodePlan p = plan(bs, shape.num_q_heads, shape.num_kv_heads, shape.head_dim,
                                          shape.page_size, shape.max_kv_len);
      floats = std::max(floats, p.workspace_floats);
      counters = std::max(counters, p.workspace_counters);
    }
    graph_workspace_ = Buffer();
    graph_counters_ = Buffer();
    if (floats > 0) {
      KV_ASSIGN_OR_RETURN(graph_workspace_, platform_.allocate_buffer(floats * sizeof(float)));
    }
    if (counters > 0) {
      KV_ASSIGN_OR_RETURN(graph_counters_, platform_.allocate_buffer(counters * sizeof(uint32_t)));
      platform_.memset(graph_counters_.data(), 0, graph_counters_.bytes());  // before any capture
    }
    // Page ids of the longest possible requests, built on the device at a fixed address.
    const int64_t pages = (int64_t{shape.max_kv_len} + shape.page_size - 1) / shape.page_size;
    graph_index_capacity_ = int64_t{shape.max_bs} * pages;
    KV_ASSIGN_OR_RETURN(
        graph_index_,
        platform_.allocate_buffer(static_cast<size_t>(graph_index_capacity_ * sizeof(int32_t))));
    return graph_plan_ints(shape.max_bs);
  }

  Result<int64_t> init_forward_metadata_decode_graph(const mem::ForwardBatch& batch, int32_t* host,
                                                     int64_t capacity,
                                                     const int32_t* device) override {
    KV_CHECK(batch.is_decode() && batch.num_tokens() == batch.batch_size(),
             "a decode graph runs decode batches");
    KV_CHECK(batch.encoder_lens.empty() && batch.self_kv_start.empty() &&
                 batch.encoder_out_cache_loc.empty(),
             "decode graphs have no encoder-decoder batches");
    KV_CHECK_GT(graph_max_kv_len_, 0, "init_decode_graph_state first");
    // Rows the host rewrote since their last forward: written eagerly now, ahead of the replay
    // on the same stream (the graph itself writes only each request's new slot).
    repair_.clear();
    const int64_t rows = repair_.append(batch.req_pool_indices);
    const MirrorWrite fix =
        plan_mirror_write(batch, repair_, rows, /*loc=*/0, MirrorWriteMode::kPrefixOnly);
    if (fix.batch > 0) {
      KV_RETURN_IF_ERROR(repair_.upload());
      write_mirror(platform_, *batch.req_to_token_device, fix, repair_.device());
    }
    build(batch, /*graph=*/true);
    graph_ = true;
    const int64_t n = meta_.stage(host, capacity, device);
    KV_CHECK_EQ(n, graph_plan_ints(batch.batch_size()), "a decode graph plan of fixed size");
    return n;
  }

  void launch_decode_graph_metadata() override {
    KV_CHECK(graph_, "launch_decode_graph_metadata after init_forward_metadata_decode_graph");
    // A graph's page ids live in the fixed buffer: nothing grows.
    const Status s = launch_device_metadata();
    KV_CHECK(s.is_ok(), "cuda-paged decode graph metadata: {}", s.to_string());
  }

  Status forward_extend(const AttentionIO& io, const AttentionLayer& layer,
                        const mem::ForwardBatch& batch) override {
    return run(io, layer, batch);
  }
  Status forward_decode(const AttentionIO& io, const AttentionLayer& layer,
                        const mem::ForwardBatch& batch) override {
    return run(io, layer, batch);
  }

 private:
  // A decode graph's plan: [slots B | rows B | new starts B | new indptr B + 1 | starts B |
  // lengths B | page indptr B + 1], offsets fixed by the batch size and no O(tokens) integer.
  static int64_t graph_plan_ints(int32_t bs) { return 7 * int64_t{bs} + 2; }

  // The forward's integers on the host (O(batch), plus an extend's prefix slots for the mirror),
  // and what each layer's launch reads of them.
  void build(const mem::ForwardBatch& batch, bool graph) {
    meta_.clear();
    plan_.reset();
    index_size_ = 0;
    mirror_ = batch.req_to_token_device;
    KV_CHECK(mirror_ != nullptr, "cuda-paged reads the batch's req_to_token mirror");
    const int32_t bs = batch.batch_size();
    bs_ = bs;
    // The gather reads token slots: lists at page size 1 whatever the pool's.
    ps_ = options_.gather ? 1 : batch.kv_pool->config().page_size;
    // Store slots first: decoder tokens, then encoder tokens computed in this forward.
    loc_ = meta_.append(batch.out_cache_loc);
    encoder_loc_ = meta_.append(batch.encoder_out_cache_loc);
    rows_ = meta_.append(batch.req_pool_indices);
    write_ = plan_mirror_write(batch, meta_, rows_, loc_,
                               graph ? MirrorWriteMode::kNewOnly : MirrorWriteMode::kAll);

    std::vector<int32_t> self_starts(bs), self_lens(bs), cross_lens(bs);
    bool any_cross = false;
    bool any_start = false;
    for (int32_t b = 0; b < bs; ++b) {
      self_starts[b] = batch.kv_start(b);
      self_lens[b] = batch.seq_lens[b];
      cross_lens[b] = batch.encoder_len(b);
      any_cross = any_cross || batch.encoder_len(b) > 0;
      any_start = any_start || self_starts[b] != 0;
    }
    // Many queries per request: tiles of queries share each K/V load on tensor cores.
    const bool prefill =
        options_.prefill_kernel && !batch.is_decode() && batch.num_tokens() > batch.batch_size();
    max_q_len_ = 0;
    for (const int32_t len : batch.extend_lens)
      max_q_len_ = std::max(max_q_len_, len);
    if (prefill || options_.gather) {  // the prefill kernel's rows; the varlen kernel's cu_q
      qo_indptr_ = meta_.append(batch.extend_start_loc);
      meta_.host().push_back(batch.num_tokens());
    }
    if (prefill) {
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
    auto add = [&](std::span<const int32_t> starts, std::span<const int32_t> lens, bool causal) {
      return prefill ? add_requests(batch, starts, lens) : add_queries(batch, starts, lens, causal);
    };
    self_ = add(any_start ? std::span<const int32_t>(self_starts) : std::span<const int32_t>(),
                self_lens, /*causal=*/true);
    cross_ = any_cross || !batch.encoder_lens.empty() ? add({}, cross_lens, false) : QuerySet{};
  }

  // Prefill kernel metadata: each request's page list (device-built), indptr and KV length.
  QuerySet add_requests(const mem::ForwardBatch& batch, std::span<const int32_t> starts,
                        std::span<const int32_t> lens) {
    QuerySet q;
    q.prefill = true;
    q.pages = plan_kv_indices(meta_, starts, lens, ps_, &index_size_, indptr_);
    q.num_queries = batch.num_tokens();
    q.kv_lens = meta_.append(lens);
    for (const int32_t len : lens) {
      q.total_kv += len;
      q.max_len = std::max(q.max_len, len);
    }
    return q;
  }

  QuerySet add_queries(const mem::ForwardBatch& batch, std::span<const int32_t> starts,
                       std::span<const int32_t> lens, bool causal) {
    QuerySet q;
    const int32_t n = batch.num_tokens();
    q.num_queries = n;
    // Starts and lengths before the page indptr: fixed offsets for a given number of queries.
    q.starts = meta_.append_zeros(2 * static_cast<int64_t>(n));
    q.lens = q.starts + n;
    q.pages = plan_kv_indices(meta_, starts, lens, ps_, &index_size_, indptr_);
    std::vector<int32_t>& host = meta_.host();
    for (int32_t b = 0; b < batch.batch_size(); ++b) {
      q.total_kv += lens[b];
      for (int32_t i = 0; i < batch.extend_lens[b]; ++i) {
        const int32_t t = batch.extend_start_loc[b] + i;
        // Decoder positions count from the start of the decoder region.
        const int32_t visible = causal ? batch.positions[t] + 1 : lens[b];
        KV_CHECK(visible <= lens[b], "token {} sees {} of {} positions", t, visible, lens[b]);
        host[q.starts + t] = indptr_[b];
        host[q.lens + t] = visible;
        q.max_len = std::max(q.max_len, visible);
      }
    }
    return q;
  }

  // The device work of the forward's metadata, queued on the current stream before the first
  // layer: the mirror write, then the page lists built from it (eager forwards: from
  // init_forward_metadata; decode graphs: captured through launch_decode_graph_metadata).
  Status launch_device_metadata() {
    const int32_t* meta = meta_.device();
    int32_t* index = nullptr;
    if (graph_) {
      KV_CHECK_LE(index_size_, graph_index_capacity_, "cuda-paged decode graph page ids");
      index = graph_index_.data_as<int32_t>();
    } else {
      // Grown before the mirror write: a failed growth queues nothing.
      const size_t bytes = static_cast<size_t>(index_size_) * sizeof(int32_t);
      KV_RETURN_IF_ERROR(reserve(index_, bytes, "page ids", std::max(bytes, size_t{4096}) * 2));
      index = index_.data_as<int32_t>();
    }
    write_mirror(platform_, *mirror_, write_, meta);
    index_ptr_ = index;
    // A decode graph launches even for an (impossible) empty batch: the capture fixes the work.
    for (const QuerySet* qs : {&self_, &cross_}) {
      if (qs->num_queries == 0 || (!graph_ && qs->pages.entries == 0)) continue;
      build_kv_indices(platform_, *mirror_, qs->pages, bs_, ps_, meta, rows_, index);
    }
    return Status::ok();
  }

  // Whether a prefill's K/V are exactly the caller's new rows, with the pool's values: self-
  // attention, no request with cached positions (every request's KV length is its query count),
  // rows the caller wrote in the pool's dtype, stored unscaled, and a head dim the paged kernels
  // take.
  static bool fresh_prefill_rows(const AttentionIO& io, const AttentionLayer& layer,
                                 const QuerySet& qs, const mem::ForwardBatch& batch,
                                 const mem::MHATokenToKVPool& pool) {
    return qs.prefill && io.new_kv_rows && !layer.is_cross_attention && io.k != nullptr &&
           io.v != nullptr && qs.total_kv == batch.num_tokens() &&
           io.dtype == pool.config().dtype && pool.k_scale(layer.layer_id) == 1.0f &&
           pool.v_scale(layer.layer_id) == 1.0f && paged_head_dim(layer.head_dim);
  }

  Status run(const AttentionIO& io, const AttentionLayer& layer, const mem::ForwardBatch& batch) {
    mem::MHATokenToKVPool& pool = *batch.kv_pool;
    const DType kv_dtype = pool.config().dtype;
    KV_CHECK(io.dtype == DType::kBF16 && ops::is_paged_kv_dtype(kv_dtype),
             "{} reads bf16 queries and a bf16 or fp8 KV cache (got {} / {})", name(),
             dtype_name(io.dtype), dtype_name(kv_dtype));
    // fp8: the kernels multiply the stored bytes back by the layer's scales.
    const float k_scale = pool.k_scale(layer.layer_id);
    const float v_scale = pool.v_scale(layer.layer_id);
    const int32_t* meta = meta_.device();
    const QuerySet& qs = layer.is_cross_attention ? cross_ : self_;
    const size_t out_bytes = static_cast<size_t>(batch.num_tokens()) * layer.num_heads *
                             layer.head_dim * dtype_size(io.dtype);
    if (qs.total_kv == 0) {
      // The empty-KV guard: zeros, no kernel.
      platform_.memset(io.out, 0, out_bytes);
      return Status::ok();
    }
    // Where the kernels read K/V: the pool through page ids, or (cuda-ragged) the gathered rows.
    const void* k_cache = pool.k_buffer(layer.layer_id).data();
    const void* v_cache = pool.v_buffer(layer.layer_id).data();
    const int32_t* page_ids = index_ptr_ + qs.pages.out;
    int32_t page_size = pool.config().page_size;
    int64_t num_slots = pool.num_slots();
    const int32_t* page_indptr = meta + qs.pages.indptr;
    if (fresh_prefill_rows(io, layer, qs, batch, pool)) {
      // Every KV position is a new row: read the caller's k / v rows in the kernels' contiguous
      // mode (row qo_indptr[b] + position), the values the pool holds, without the page table
      // (the Hopper prefill kernel then loads whole tiles by TMA at any page size) and, for
      // cuda-ragged, without the gather.
      k_cache = io.k;
      v_cache = io.v;
      page_ids = nullptr;
      page_size = 1;
      page_indptr = meta + qo_indptr_;
      num_slots = batch.num_tokens();
    } else if (options_.gather) {
      if (!paged_head_dim(layer.head_dim)) return run_varlen(io, layer, batch, qs);
      KV_RETURN_IF_ERROR(gather(qs, layer, pool, kv_dtype));
      k_cache = k_gathered_.data();
      v_cache = v_gathered_.data();
      page_ids = nullptr;  // contiguous: row indptr + position
      page_size = 1;
      num_slots = qs.pages.entries;
    }
    if (qs.prefill) {
      const ops::PagedPrefillParams p{
          .q = io.q,
          .k_cache = k_cache,
          .v_cache = v_cache,
          .kv_dtype = kv_dtype,
          .k_scale = k_scale,
          .v_scale = v_scale,
          .qo_indptr = meta + qo_indptr_,
          .page_indptr = page_indptr,
          .page_ids = page_ids,
          .kv_lens = meta + qs.kv_lens,
          .out = io.out,
          .num_slots = num_slots,
          .batch = batch.batch_size(),
          .total_q = batch.num_tokens(),
          .num_q_heads = layer.num_heads,
          .num_kv_heads = layer.num_kv_heads,
          .head_dim = layer.head_dim,
          .page_size = page_size,
          .causal = !layer.is_cross_attention,
          .sm_scale = layer.scaling,
          .window_left = layer.window_left,
          .logit_softcap = layer.logit_softcap,
      };
      ops::paged_prefill(platform_, p);
      return Status::ok();
    }
    const ops::PagedDecodePlan& plan = decode_plan(qs, layer, page_size);
    Buffer& workspace = graph_ ? graph_workspace_ : workspace_;
    const size_t workspace_bytes = plan.workspace_floats * sizeof(float);
    KV_CHECK(!graph_ || workspace_bytes <= workspace.bytes(),
             "cuda-paged: a decode graph needs {} split floats, {} preallocated",
             plan.workspace_floats, workspace.bytes() / sizeof(float));
    KV_RETURN_IF_ERROR(reserve(workspace, workspace_bytes, "split workspace"));
    // The split counters: zero between launches (the kernel's last blocks reset them), so only a
    // newly allocated buffer is zeroed (on the default stream, before the kernel).
    Buffer& counters = graph_ ? graph_counters_ : counters_;
    const size_t counter_bytes = plan.workspace_counters * sizeof(uint32_t);
    KV_CHECK(!graph_ || counter_bytes <= counters.bytes(),
             "cuda-paged: a decode graph needs {} split counters, {} preallocated",
             plan.workspace_counters, counters.bytes() / sizeof(uint32_t));
    if (counter_bytes > counters.bytes()) {
      KV_RETURN_IF_ERROR(reserve(counters, counter_bytes, "split counters"));
      platform_.memset(counters.data(), 0, counters.bytes());
    }
    const ops::PagedDecodeWorkspace ws = ops::paged_decode_workspace(
        plan, workspace.data_as<float>(), counters.data_as<uint32_t>(), layer.head_dim);
    ops::PagedDecodeParams p{
        .q = io.q,
        .k_cache = k_cache,
        .v_cache = v_cache,
        .kv_dtype = kv_dtype,
        .k_scale = k_scale,
        .v_scale = v_scale,
        .page_indptr = meta + qs.starts,
        .page_ids = page_ids,
        .seq_lens = meta + qs.lens,
        .out = io.out,
        .partial_out = ws.partial_out,
        .partial_lse = ws.partial_lse,
        .split_counters = ws.split_counters,
        .batch = qs.num_queries,
        .num_q_heads = layer.num_heads,
        .num_kv_heads = layer.num_kv_heads,
        .head_dim = layer.head_dim,
        .page_size = page_size,
        .num_splits = plan.num_splits,
        .tokens_per_split = plan.tokens_per_split,
        .min_tokens_per_split = plan.min_tokens_per_split,
        .sm_scale = layer.scaling,
        .window_left = layer.window_left,
        .logit_softcap = layer.logit_softcap,
        // A decode step (one new token per request): its metadata was written before the step's
        // first kernel and the kernels before the attention store only each request's newest
        // K/V row, so the kernel may read the rest before waiting for them. An extend's queries
        // read rows its own step stores.
        .stable_before_wait = batch.is_decode() && qs.num_queries == batch.batch_size(),
    };
    if (use_tc(layer.num_heads, layer.num_kv_heads, layer.head_dim, p.page_size)) {
      ops::paged_decode_tc(platform_, p);
    } else {
      ops::paged_decode(platform_, p);
    }
    return Status::ok();
  }

  // Head dims of the paged kernels (decode, decode_tc, prefill): the capability table's.
  static bool paged_head_dim(int32_t head_dim) {
    return std::ranges::find(kPagedKernelHeadDims, head_dim) != std::end(kPagedKernelHeadDims);
  }

  // cuda-ragged: copies the layer's K and V rows of `qs`'s slot list, in list order, into the
  // contiguous buffers as `out_dtype`: the cache's own dtype copies the bytes (fp8 as stored), bf16
  // from an fp8 cache widens them into values (the varlen kernel's input). Row indptr[b] + t is
  // then request b's position t.
  Status gather(const QuerySet& qs, const AttentionLayer& layer, mem::MHATokenToKVPool& pool,
                DType out_dtype) {
    const DType kv_dtype = pool.config().dtype;
    const int64_t kv_width = static_cast<int64_t>(layer.num_kv_heads) * layer.head_dim;
    const size_t bytes = static_cast<size_t>(qs.pages.entries * kv_width) * dtype_size(out_dtype);
    KV_RETURN_IF_ERROR(reserve(k_gathered_, bytes, "gathered K"));
    KV_RETURN_IF_ERROR(reserve(v_gathered_, bytes, "gathered V"));
    const TensorView kc = pool.k_buffer(layer.layer_id);
    ops::gather_kv(platform_, {.k_cache = kc.data(),
                               .v_cache = pool.v_buffer(layer.layer_id).data(),
                               .slots = index_ptr_ + qs.pages.out,
                               .k_out = k_gathered_.data(),
                               .v_out = v_gathered_.data(),
                               .dtype = out_dtype,
                               .cache_dtype = kv_dtype,
                               .k_scale = pool.k_scale(layer.layer_id),
                               .v_scale = pool.v_scale(layer.layer_id),
                               .num_tokens = qs.pages.entries,
                               .row_elems = kv_width,
                               .num_slots = kc.dim(0)});
    return Status::ok();
  }

  // cuda-ragged at a head dim the paged kernels lack: the CUDA-core varlen kernel over bf16 rows
  // (an fp8 cache widened by the gather), sequences cut by the forward's cu_q and the slot lists'
  // indptr.
  Status run_varlen(const AttentionIO& io, const AttentionLayer& layer,
                    const mem::ForwardBatch& batch, const QuerySet& qs) {
    KV_RETURN_IF_ERROR(gather(qs, layer, *batch.kv_pool, io.dtype));
    const int32_t* meta = meta_.device();
    const int64_t q_width = static_cast<int64_t>(layer.num_heads) * layer.head_dim;
    const int64_t kv_width = static_cast<int64_t>(layer.num_kv_heads) * layer.head_dim;
    ops::varlen_attention(platform_, {.q = io.q,
                                      .k = k_gathered_.data(),
                                      .v = v_gathered_.data(),
                                      .out = io.out,
                                      .cu_q = meta + qo_indptr_,
                                      .cu_kv = meta + qs.pages.indptr,
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
                                      .window_left = layer.window_left,
                                      .logit_softcap = layer.logit_softcap,
                                      .causal = !layer.is_cross_attention});
    return Status::ok();
  }

  // Grows `buf` to hold at least `bytes`, allocating `capacity` bytes (at least `bytes`) when it
  // must; contents are not kept. Every buffer the backend grows on demand (page ids, split
  // workspace, gathered K/V) goes through here; running out of device memory is kOutOfMemory
  // (the forward fails, the server goes on; `buf` is left empty, to be grown again next time).
  Status reserve(Buffer& buf, size_t bytes, const char* what, size_t capacity = 0) {
    if (bytes <= buf.bytes()) return Status::ok();
    buf = Buffer();
    auto grown = platform_.allocate_buffer(std::max(bytes, capacity));
    if (!grown.is_ok()) {
      return make_status(grown.status().code(), "{} {} buffer of {} bytes: {}", name(), what, bytes,
                         grown.status().message());
    }
    buf = std::move(*grown);
    return Status::ok();
  }

  // Whether decode runs on the tensor-core kernel (CudaPagedOptions::decode_tc and the
  // platform's KernelSwitches::decode_tc) for this shape.
  bool use_tc(int32_t num_heads, int32_t num_kv_heads, int32_t head_dim, int32_t page_size) const {
    return options_.decode_tc && platform_.kernel_switches().decode_tc &&
           paged_head_dim(head_dim) && num_kv_heads > 0 && num_heads % num_kv_heads == 0 &&
           num_heads / num_kv_heads <= kPagedKernelMaxGroup && (page_size & (page_size - 1)) == 0 &&
           page_size <= 128;
  }

  // The split plan of the kernel that will run; a sliding window plans over the positions a query
  // reads (at most window_left + 1).
  ops::PagedDecodePlan plan(int32_t batch, int32_t num_heads, int32_t num_kv_heads,
                            int32_t head_dim, int32_t page_size, int32_t max_len,
                            int32_t window_left = -1) const {
    return use_tc(num_heads, num_kv_heads, head_dim, page_size)
               ? ops::plan_paged_decode_tc(batch, num_heads, num_kv_heads, head_dim, max_len,
                                           num_sms_, platform_.kernel_switches().decode_tc_stages,
                                           window_left)
               : ops::plan_paged_decode(batch, num_heads, num_kv_heads, head_dim, max_len, num_sms_,
                                        window_left);
  }

  // The split-KV plan, made at the first layer and reused by the others (cross-attention, whose
  // lengths differ, and layers of another sliding window plan for themselves: the key holds the
  // window). A decode graph plans for the longest possible request: with per-request splits every
  // request is cut as in the eager plan of the same batch, and a windowed plan never needs more
  // split workspace than the unwindowed one init_decode_graph_state sized.
  const ops::PagedDecodePlan& decode_plan(const QuerySet& qs, const AttentionLayer& layer,
                                          int32_t page_size) {
    const PlanKey key{layer.is_cross_attention, layer.num_heads, layer.num_kv_heads, layer.head_dim,
                      layer.window_left};
    if (!plan_.has_value() || plan_key_ != key) {
      const int32_t max_len = graph_ ? graph_max_kv_len_ : qs.max_len;
      plan_ = plan(qs.num_queries, layer.num_heads, layer.num_kv_heads, layer.head_dim, page_size,
                   max_len, layer.window_left);
      plan_key_ = key;
    }
    return *plan_;
  }

  using PlanKey = std::tuple<bool, int32_t, int32_t, int32_t, int32_t>;  // ..., window_left

  platform::Platform& platform_;
  CudaPagedOptions options_;
  int32_t num_sms_ = 1;
  DeviceMetadata meta_;
  DeviceMetadata repair_;  // decode graphs: the host's rewrites, written ahead of the replay
  mem::DeviceReqToToken* mirror_ = nullptr;
  MirrorWrite write_;
  std::vector<int32_t> indptr_;  // host copy of the last planned page indptr
  Buffer index_;                 // eager page ids, grown on demand
  Buffer graph_index_;           // decode graphs: fixed, sized by init_decode_graph_state
  int64_t graph_index_capacity_ = 0;
  int64_t index_size_ = 0;              // page ids this forward builds
  const int32_t* index_ptr_ = nullptr;  // where they are
  int32_t bs_ = 0;
  int32_t ps_ = 1;
  int64_t rows_ = 0;
  Buffer workspace_;        // eager split workspace, grown on demand
  Buffer graph_workspace_;  // decode graphs: fixed, sized by init_decode_graph_state
  Buffer counters_;         // eager split counters (zeroed when allocated), grown on demand
  Buffer graph_counters_;   // decode graphs' split counters: fixed, zeroed by
                            // init_decode_graph_state
  bool graph_ = false;      // the current plan was staged for a decode graph
  int32_t graph_max_kv_len_ = 0;
  std::optional<ops::PagedDecodePlan> plan_;
  PlanKey plan_key_;
  int64_t loc_ = 0;
  int64_t encoder_loc_ = 0;
  int64_t qo_indptr_ = 0;  // [batch + 1] when the prefill kernel runs, and always for cuda-ragged
  int32_t max_q_len_ = 0;  // the batch's longest extend (the varlen kernel's grid)
  Buffer k_gathered_;      // cuda-ragged: the layer's gathered K rows, grown on demand
  Buffer v_gathered_;
  QuerySet self_;
  QuerySet cross_;
};

}  // namespace

std::unique_ptr<AttentionBackend> make_cuda_paged_backend(platform::Platform& platform,
                                                          CudaPagedOptions options) {
  return std::make_unique<CudaPagedBackend>(platform, options);
}

std::unique_ptr<AttentionBackend> make_cuda_ragged_backend(platform::Platform& platform,
                                                           CudaPagedOptions options) {
  options.gather = true;
  return std::make_unique<CudaPagedBackend>(platform, options);
}

}  // namespace kvserve::attention
