#include "kvserve/model/causal_lm.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string_view>
#include <utility>

#include "kvserve/model/rope.h"
#include "kvserve/platform/ops/gemm.h"
#include "kvserve/platform/ops/layer_ops.h"

namespace kvserve::model {

struct CausalLM::Layer {
  Tensor qkv_proj;                  // [(heads + 2 * kv_heads) * head_dim, hidden]
  Tensor qkv_bias;                  // [(heads + 2 * kv_heads) * head_dim] or empty
  Tensor o_proj;                    // [hidden, heads * head_dim]
  Tensor gate_up_proj;              // [2 * intermediate, hidden]
  Tensor down_proj;                 // [hidden, intermediate]
  Tensor input_layernorm;           // [hidden]
  Tensor post_attention_layernorm;  // [hidden]
  Tensor q_norm, k_norm;            // [head_dim]; DecoderFamily::qk_norm only
  // [hidden]; DecoderFamily::sandwich_norms only (post_attention_layernorm then normalizes the
  // attention output, pre_feedforward_layernorm the residual going into the MLP).
  Tensor pre_feedforward_layernorm, post_feedforward_layernorm;
};

// Activations of one forward in the compute dtype and the batch's per-token integers on the
// device. The eager workspace grows to the largest batch seen; the static one (decode graphs) is
// sized once and never moves, since captured graphs hold its addresses.
struct CausalLM::Workspace {
  int64_t tokens = 0;
  Tensor hidden, residual, normed, qkv, q, k, v, attn, gate_up, act, last;
  Tensor ints;  // i32 [3, tokens]: input_ids | positions | logits_indices (mem::upload_batch_ints)
  int64_t logit_rows = 0;
  Tensor
      logits;  // f32 [logit_rows, vocab] on device platforms (the CPU writes the caller's vector)
  Tensor greedy;  // i32 [logit_rows]: each logits row's argmax, on device platforms
  std::vector<int32_t> host_ints;

  // Logits rows are few (one per request) even when tokens are many (a long prefill). A failed
  // growth leaves the workspace empty (sized 0), so the next call allocates it whole.
  Status reserve_logits(platform::Platform& p, int64_t vocab, int64_t rows) {
    if (rows <= logit_rows || p.device().is_cpu()) return Status::ok();
    logits = Tensor();
    greedy = Tensor();
    logit_rows = 0;
    KV_ASSIGN_OR_RETURN(logits, p.empty(DType::kF32, {rows, vocab}));
    KV_ASSIGN_OR_RETURN(greedy, p.empty(DType::kI32, {rows}));
    logit_rows = rows;
    return Status::ok();
  }

  Status reserve(platform::Platform& p, const checkpoint::ModelConfig& c, DType dt, int64_t n) {
    if (n <= tokens) return Status::ok();
    tokens = 0;  // until every tensor below has its new size
    const int64_t qd = static_cast<int64_t>(c.num_attention_heads) * c.head_dim;
    const int64_t kvd = static_cast<int64_t>(c.num_key_value_heads) * c.head_dim;
    const int64_t h = c.hidden_size;
    const int64_t inter = c.intermediate_size;
    auto alloc = [&](Tensor& t, int64_t cols, DType type) -> Status {
      t = Tensor();  // free the smaller one first
      KV_ASSIGN_OR_RETURN(t, p.empty(type, {n, cols}));
      return Status::ok();
    };
    for (auto [t, cols] : {std::pair{&hidden, h},
                           {&residual, h},
                           {&normed, h},
                           {&last, h},
                           {&qkv, qd + 2 * kvd},
                           {&q, qd},
                           {&k, kvd},
                           {&v, kvd},
                           {&attn, qd},
                           {&gate_up, 2 * inter},
                           {&act, inter}}) {
      KV_RETURN_IF_ERROR(alloc(*t, cols, dt));
    }
    KV_RETURN_IF_ERROR(alloc(ints, 3, DType::kI32));
    tokens = n;
    return Status::ok();
  }
};

namespace {

std::string shape_str(const std::vector<int64_t>& s) {
  return fmt::format("[{}]", fmt::join(s, ", "));
}

// A slice of one checkpoint tensor whose whole shape is `full`: rows [row_begin, row_begin + rows)
// and, for a matrix, columns [col_begin, col_begin + cols) (-1: all of them).
struct Slice {
  std::string name;
  std::vector<int64_t> full;
  int64_t row_begin = 0;
  int64_t rows = -1;
  int64_t col_begin = 0;
  int64_t cols = -1;
};

// Copies checkpoint tensors (any float dtype), or slices of them, into consecutive row blocks of
// one tensor of the compute dtype on the platform. A slice is read from the memory-mapped file
// row segment by row segment into a host buffer of the slice's size: a tensor-parallel rank never
// holds a whole tensor it does not keep.
class WeightLoader {
 public:
  WeightLoader(const checkpoint::WeightStore& store, platform::Platform& p, DType dtype)
      : store_(store), platform_(p), dtype_(dtype) {}

  // One tensor of exactly `shape`.
  Result<Tensor> load(const std::string& name, std::vector<int64_t> shape) {
    return load_slices({Slice{.name = name, .full = shape}}, shape);
  }

  // Slices stacked along dim 0 into `shape` (each slice has shape[1] columns).
  Result<Tensor> load_slices(const std::vector<Slice>& parts, std::vector<int64_t> shape) {
    KV_ASSIGN_OR_RETURN(Tensor out, platform_.empty(dtype_, shape));
    const size_t elem = dtype_size(dtype_);
    const int64_t out_cols = shape.size() > 1 ? shape[1] : 1;
    KV_CHECK(shape.size() <= 2, "weights of rank {}", shape.size());
    int64_t row = 0;
    for (const Slice& part : parts) {
      KV_ASSIGN_OR_RETURN(checkpoint::WeightView w, store_.get(part.name));
      if (!is_floating(w.dtype) || is_float8(w.dtype)) {
        return invalid_argument("{}: tensor {} has dtype {}; expected bf16, f16 or f32", w.file,
                                part.name, dtype_name(w.dtype));
      }
      if (w.shape != part.full) {
        return invalid_argument("{}: tensor {} has shape {}, expected {}", w.file, part.name,
                                shape_str(w.shape), shape_str(part.full));
      }
      const int64_t full_rows = part.full[0];
      const int64_t full_cols = part.full.size() > 1 ? part.full[1] : 1;
      const int64_t rows = part.rows < 0 ? full_rows : part.rows;
      const int64_t cols = part.cols < 0 ? full_cols : part.cols;
      KV_CHECK(part.row_begin + rows <= full_rows && part.col_begin + cols <= full_cols &&
                   cols == out_cols && row + rows <= shape[0],
               "slice of {} outside the tensor or the output", part.name);
      void* dst = out.data_as<uint8_t>() + row * out_cols * elem;
      const size_t src_elem = dtype_size(w.dtype);
      const auto* src = static_cast<const uint8_t*>(w.data) +
                        (part.row_begin * full_cols + part.col_begin) * src_elem;
      const int64_t n = rows * cols;
      if (cols == full_cols && w.dtype == dtype_) {
        platform_.copy(dst, src, n * elem, platform::CopyKind::kHostToDevice);
      } else {
        host_.resize(n * elem);
        for (int64_t r = 0; r < rows; ++r) {
          const uint8_t* from = src + r * full_cols * src_elem;
          uint8_t* to = host_.data() + r * cols * elem;
          if (w.dtype == dtype_) {
            std::memcpy(to, from, cols * elem);
          } else {
            convert_elements(from, w.dtype, to, dtype_, cols);
          }
        }
        platform_.copy(dst, host_.data(), n * elem, platform::CopyKind::kHostToDevice);
      }
      row += rows;
      bytes_ += n * elem;
    }
    KV_CHECK_EQ(row, shape[0], "slices fill the output");
    return out;
  }

  size_t bytes() const { return bytes_; }

 private:
  const checkpoint::WeightStore& store_;
  platform::Platform& platform_;
  DType dtype_;
  std::vector<uint8_t> host_;
  size_t bytes_ = 0;
};

// The compute dtype of a platform: f32 on the CPU (exact against the float64 references), bf16
// on CUDA (tensor cores, half the bytes; f32 accumulation everywhere).
DType compute_dtype_of(const platform::Platform& p) {
  return CausalLM::compute_dtype(p.device().kind);
}

}  // namespace

CausalLM::CausalLM(const checkpoint::ModelConfig& config, platform::Platform& platform)
    : config_(config),
      platform_(platform),
      dtype_(compute_dtype_of(platform)),
      family_(describe_decoder_family(config, dtype_)),
      ws_(std::make_unique<Workspace>()) {}

CausalLM::~CausalLM() = default;

Result<std::unique_ptr<CausalLM>> CausalLM::load(
    const checkpoint::ModelConfig& c, const checkpoint::WeightStore& weights,
    platform::Platform& platform, int64_t max_seq_len,
    const std::function<void(int64_t done, int64_t total)>& on_layer, const TensorParallel& tp) {
  KV_ASSIGN_OR_RETURN(const TpShard shard, make_tp_shard(c, tp.rank(), tp.size()));
  std::unique_ptr<CausalLM> m(new CausalLM(c, platform));
  m->shard_ = shard;
  m->local_ = shard_config(c, shard);
  // Any communicator, even of one rank (the collectives then leave the data as it is: the
  // communicator path tested against the plain one).
  m->comm_ = tp.comm;
  WeightLoader loader(weights, platform, m->dtype_);
  const int64_t h = c.hidden_size;
  const int64_t hd = c.head_dim;
  const int64_t qd_full = int64_t{c.num_attention_heads} * hd;
  const int64_t kvd_full = int64_t{c.num_key_value_heads} * hd;
  const int64_t qd = int64_t{shard.heads} * hd;
  const int64_t kvd = int64_t{shard.kv_heads} * hd;
  const int64_t inter = shard.inter;
  const int64_t vocab_full = c.vocab_size;
  // Row (or, for 1-D tensors, element) slices and column slices of this rank.
  auto rows_of = [](std::string name, std::vector<int64_t> full, int64_t begin, int64_t n) {
    return Slice{.name = std::move(name), .full = std::move(full), .row_begin = begin, .rows = n};
  };
  auto cols_of = [](std::string name, std::vector<int64_t> full, int64_t begin, int64_t n) {
    return Slice{.name = std::move(name), .full = std::move(full), .col_begin = begin, .cols = n};
  };
  KV_ASSIGN_OR_RETURN(m->embed_tokens_,
                      loader.load_slices({rows_of("model.embed_tokens.weight", {vocab_full, h},
                                                  shard.vocab_start, shard.vocab)},
                                         {shard.vocab, h}));
  KV_ASSIGN_OR_RETURN(m->final_norm_, loader.load("model.norm.weight", {h}));
  if (!c.tie_word_embeddings) {
    KV_ASSIGN_OR_RETURN(m->lm_head_, loader.load_slices({rows_of("lm_head.weight", {vocab_full, h},
                                                                 shard.vocab_start, shard.vocab)},
                                                        {shard.vocab, h}));
  }
  KV_CHECK_EQ(c.layer_window_left.size(), static_cast<size_t>(c.num_hidden_layers),
              "ModelConfig::layer_window_left has one entry per layer");
  const int64_t steps = c.num_hidden_layers + 1;
  if (on_layer) on_layer(1, steps);
  m->layers_.resize(c.num_hidden_layers);
  for (int32_t i = 0; i < c.num_hidden_layers; ++i) {
    Layer& l = m->layers_[i];
    const std::string p = fmt::format("model.layers.{}.", i);
    // This rank's heads of q and its KV heads of k and v, stacked (the merged GEMM).
    const int64_t q0 = int64_t{shard.head_start} * hd;
    const int64_t kv0 = int64_t{shard.kv_head_start} * hd;
    KV_ASSIGN_OR_RETURN(
        l.qkv_proj,
        loader.load_slices({rows_of(p + "self_attn.q_proj.weight", {qd_full, h}, q0, qd),
                            rows_of(p + "self_attn.k_proj.weight", {kvd_full, h}, kv0, kvd),
                            rows_of(p + "self_attn.v_proj.weight", {kvd_full, h}, kv0, kvd)},
                           {qd + 2 * kvd, h}));
    if (m->family_.qkv_bias) {
      KV_ASSIGN_OR_RETURN(
          l.qkv_bias,
          loader.load_slices({rows_of(p + "self_attn.q_proj.bias", {qd_full}, q0, qd),
                              rows_of(p + "self_attn.k_proj.bias", {kvd_full}, kv0, kvd),
                              rows_of(p + "self_attn.v_proj.bias", {kvd_full}, kv0, kvd)},
                             {qd + 2 * kvd}));
    }
    // Row-parallel: this rank's input columns; the ranks' outputs are summed.
    KV_ASSIGN_OR_RETURN(
        l.o_proj, loader.load_slices({cols_of(p + "self_attn.o_proj.weight", {h, qd_full}, q0, qd)},
                                     {h, qd}));
    const int64_t inter_full = c.intermediate_size;
    KV_ASSIGN_OR_RETURN(
        l.gate_up_proj,
        loader.load_slices(
            {rows_of(p + "mlp.gate_proj.weight", {inter_full, h}, shard.inter_start, inter),
             rows_of(p + "mlp.up_proj.weight", {inter_full, h}, shard.inter_start, inter)},
            {2 * inter, h}));
    KV_ASSIGN_OR_RETURN(l.down_proj,
                        loader.load_slices({cols_of(p + "mlp.down_proj.weight", {h, inter_full},
                                                    shard.inter_start, inter)},
                                           {h, inter}));
    KV_ASSIGN_OR_RETURN(l.input_layernorm, loader.load(p + "input_layernorm.weight", {h}));
    KV_ASSIGN_OR_RETURN(l.post_attention_layernorm,
                        loader.load(p + "post_attention_layernorm.weight", {h}));
    if (m->family_.qk_norm) {
      KV_ASSIGN_OR_RETURN(l.q_norm, loader.load(p + "self_attn.q_norm.weight", {c.head_dim}));
      KV_ASSIGN_OR_RETURN(l.k_norm, loader.load(p + "self_attn.k_norm.weight", {c.head_dim}));
    }
    if (m->family_.sandwich_norms) {
      KV_ASSIGN_OR_RETURN(l.pre_feedforward_layernorm,
                          loader.load(p + "pre_feedforward_layernorm.weight", {h}));
      KV_ASSIGN_OR_RETURN(l.post_feedforward_layernorm,
                          loader.load(p + "post_feedforward_layernorm.weight", {h}));
    }
    if (on_layer) on_layer(i + 2, steps);
  }
  // One table per distinct rotary base (Gemma 3: the sliding layers' base, unscaled, and the
  // full layers' base with rope_scaling).
  for (const RopeSpec& spec : m->family_.ropes) {
    checkpoint::ModelConfig rc = c;
    rc.rope_theta = spec.theta;
    if (!spec.scaled) rc.rope_scaling = checkpoint::RopeScaling{};
    RopeTable table = make_rope_table(rc, c.head_dim, max_seq_len);
    if (table.length_dependent && m->family_.ropes.size() > 1) {
      return Status(StatusCode::kUnimplemented,
                    fmt::format("config.json: rope_scaling {} with per-layer rotary bases (layer "
                                "types with their own rope_theta) is not implemented",
                                c.rope_scaling.rope_type));
    }
    m->rope_length_dependent_ = m->rope_length_dependent_ || table.length_dependent;
    KV_ASSIGN_OR_RETURN(Tensor t,
                        platform.empty(DType::kF32, {static_cast<int64_t>(table.inv_freq.size())}));
    platform.copy(t.data(), table.inv_freq.data(), table.inv_freq.size() * sizeof(float),
                  platform::CopyKind::kHostToDevice);
    m->inv_freq_.push_back(std::move(t));
    m->ropes_.push_back(std::move(table));
  }
  m->weight_bytes_ = loader.bytes();
  return m;
}

Result<mem::DeviceBatchInts> CausalLM::upload_eager(const mem::ForwardBatch& batch) {
  const int64_t n = batch.num_tokens();
  KV_CHECK_GT(n, 0, "empty batch");
  const auto rows = static_cast<int64_t>(batch.logits_indices.size());
  KV_CHECK_LE(rows, n, "more logits rows than tokens");
  Status reserved = ws_->reserve(platform_, local_, dtype_, n);
  if (reserved.is_ok()) reserved = ws_->reserve_logits(platform_, config_.vocab_size, rows);
  if (!reserved.is_ok()) {
    // A workspace left half-grown is rebuilt whole by the next reserve (tokens was not raised).
    return make_status(reserved.code(), "activation memory for {} tokens: {}", n,
                       reserved.message());
  }
  if (rope_length_dependent_) {
    // Each token rotates with the frequencies of its request's length after this forward, as
    // transformers recomputes them from max(position_ids) + 1 (model/rope.h).
    host_rope_rows_.assign(static_cast<size_t>(n), 0);
    for (int32_t b = 0; b < batch.batch_size(); ++b) {
      const int32_t row = ropes_.front().row_for(batch.seq_lens[b]);
      std::fill_n(host_rope_rows_.begin() + batch.extend_start_loc[b], batch.extend_lens[b], row);
    }
    if (rope_rows_.empty() || rope_rows_.numel() < n) {  // an empty Tensor's numel() is 1
      rope_rows_ = Tensor();
      auto grown = platform_.empty(DType::kI32, {n});
      if (!grown.is_ok()) {
        return make_status(grown.status().code(), "rope rows for {} tokens: {}", n,
                           grown.status().message());
      }
      rope_rows_ = std::move(grown).value();
    }
    platform_.copy(rope_rows_.data(), host_rope_rows_.data(), n * sizeof(int32_t),
                   platform::CopyKind::kHostToDevice);
  }
  return mem::upload_batch_ints(platform_, batch, ws_->host_ints, ws_->ints.data_as<int32_t>());
}

Status CausalLM::run(const mem::ForwardBatch& batch, attention::AttentionBackend& backend,
                     Workspace& w, const mem::DeviceBatchInts& in, float* host_logits) {
  const checkpoint::ModelConfig& c = config_;
  const int64_t n = batch.num_tokens();
  const auto rows = static_cast<int64_t>(batch.logits_indices.size());
  KV_CHECK(n > 0 && n <= w.tokens && (host_logits != nullptr || rows <= w.logit_rows),
           "a forward of {} tokens and {} logits rows in a workspace of {} and {}", n, rows,
           w.tokens, w.logit_rows);
  const int64_t h = c.hidden_size;
  // This rank's heads and MLP columns (all of them with one rank).
  const int32_t heads = local_.num_attention_heads;
  const int32_t kv_heads = local_.num_key_value_heads;
  const int64_t qd = static_cast<int64_t>(heads) * c.head_dim;
  const int64_t qkv_cols = qd + 2 * static_cast<int64_t>(kv_heads) * c.head_dim;
  const int64_t inter = local_.intermediate_size;
  const auto eps = static_cast<float>(c.rms_norm_eps);
  for (const int32_t t : batch.logits_indices)
    KV_CHECK(t >= 0 && t < n, "logits index {} of {} tokens", t, n);

  // Who stores the layers' new K/V, asked once: the backend inside forward_*, or this model
  // through the backend's slots, fused into split_qkv_rope where the cache holds the
  // activations' dtype unscaled (fp8 caches and scaled layers: attention::store_kv's kernel),
  // unless the platform's KernelSwitches::fused_kv_store keeps them apart (A/B measurements).
  const bool caller_stores = backend.kv_store() == attention::KvStore::kCaller;
  const int32_t* store_slots = caller_stores ? backend.store_slots(/*cross=*/false) : nullptr;
  KV_CHECK(!caller_stores || store_slots != nullptr, "{}: no store slots", backend.name());
  const bool fusable = caller_stores && platform_.kernel_switches().fused_kv_store &&
                       batch.kv_pool->config().dtype == dtype_;
  const int32_t* ids = in.input_ids;
  const int32_t* positions = in.positions;
  const int32_t* logits_indices = in.logits_indices;
  // Filled by upload_eager (a length-dependent rope has no static forward).
  const int32_t* rope_rows = rope_length_dependent_ ? rope_rows_.data_as<int32_t>() : nullptr;

  auto gemm = [&](const Tensor& a, const Tensor& b, const Tensor* bias, const Tensor& out,
                  int64_t m, int64_t cols, int64_t k) {
    ops::gemm(platform_, {.a = a.data(),
                          .b = b.data(),
                          .bias = bias && !bias->empty() ? bias->data() : nullptr,
                          .c = out.data(),
                          .dtype = dtype_,
                          .m = m,
                          .n = cols,
                          .k = k,
                          .lda = k,
                          .ldb = k,
                          .ldc = cols});
  };
  const DecoderFamily& fam = family_;
  // Rows of `cols` (the hidden width, or one head for the q/k norms).
  auto norm_rows = [&](const void* x, const Tensor* residual, void* out, const Tensor& weight,
                       int64_t num_rows, int64_t cols) {
    ops::rms_norm(platform_, {.x = x,
                              .residual = residual ? residual->data() : nullptr,
                              .out = out,
                              .weight = weight.data(),
                              .dtype = dtype_,
                              .rows = num_rows,
                              .cols = cols,
                              .x_stride = cols,
                              .eps = eps,
                              .weight_offset = fam.norm_weight_offset});
  };
  auto rms_norm = [&](const Tensor& x, const Tensor* residual, const Tensor& out,
                      const Tensor& weight) {
    norm_rows(x.data(), residual, out.data(), weight, n, h);
  };
  // A norm and the projection it feeds (the qkv and gate_up projections), one op: with
  // `add_residual`, x joins the residual stream (w.residual, in place) first; without, x starts it
  // (the first layer).
  auto normed_linear = [&](const Tensor& x, bool add_residual, const Tensor& norm_weight,
                           const Tensor& weight, const Tensor* bias, const Tensor& out,
                           int64_t cols, bool gated) {
    ops::normed_linear(platform_, {.x = x.data(),
                                   .residual_in = add_residual ? w.residual.data() : nullptr,
                                   .residual_out = w.residual.data(),
                                   .norm_weight = norm_weight.data(),
                                   .eps = eps,
                                   .weight_offset = fam.norm_weight_offset,
                                   .w = weight.data(),
                                   .bias = bias && !bias->empty() ? bias->data() : nullptr,
                                   .out = out.data(),
                                   .dtype = dtype_,
                                   .m = n,
                                   .n = cols,
                                   .k = h,
                                   .gated = gated,
                                   .activation = fam.activation,
                                   .normed = w.normed.data(),
                                   .gate_up = w.gate_up.data()});
  };

  // Vocab-parallel: each rank looks up the ids of its rows (zeros elsewhere); exactly one rank
  // holds each id, so the sum is exact.
  ops::embedding(platform_, {.table = embed_tokens_.data(),
                             .ids = ids,
                             .out = w.hidden.data(),
                             .dtype = dtype_,
                             .num_tokens = n,
                             .hidden = h,
                             .vocab = shard_.vocab,
                             .vocab_start = shard_.vocab_start,
                             .mask_outside = comm_ != nullptr,
                             .scale = fam.embedding_scale});
  KV_RETURN_IF_ERROR(all_reduce(w.hidden, n * h));
  for (size_t li = 0; li < layers_.size(); ++li) {
    const Layer& l = layers_[li];
    // Pre-attention norm and qkv_proj: the embeddings start the residual stream, and from the
    // second layer on the previous MLP output joins it.
    normed_linear(w.hidden, /*add_residual=*/li > 0, l.input_layernorm, l.qkv_proj, &l.qkv_bias,
                  w.qkv, qkv_cols, /*gated=*/false);
    const RopeTable& rope = ropes_[fam.layer_rope[li]];
    const float* inv_freq = inv_freq_[fam.layer_rope[li]].data_as<float>();
    ops::SplitQkvRopeParams split{.qkv = w.qkv.data(),
                                  .q = w.q.data(),
                                  .k = w.k.data(),
                                  .v = w.v.data(),
                                  .dtype = dtype_,
                                  .positions = positions,
                                  .inv_freq = inv_freq,
                                  .rope_rows = rope.length_dependent ? rope_rows : nullptr,
                                  .attention_factor = rope.attention_factor,
                                  .num_tokens = n,
                                  .num_heads = heads,
                                  .num_kv_heads = kv_heads,
                                  .head_dim = c.head_dim,
                                  .rotary_dim = c.head_dim};
    // The q/k norms sit between the split and the rotation: split unrotated (rotary_dim 0), norm
    // each head in place, then rotate; the K/V store is then the unfused one.
    if (fam.qk_norm) split.rotary_dim = 0;
    // With KernelSwitches::prefill_new_rows an extend keeps its k / v rows, which its attention
    // may read in place of the pool (AttentionIO::new_kv_rows: a fresh prefill's K/V as
    // contiguous rows), and pays one store kernel per layer for it.
    const bool new_rows = platform_.kernel_switches().prefill_new_rows && !batch.is_decode();
    const bool fuse_store = fusable && !new_rows && !fam.qk_norm &&
                            batch.kv_pool->k_scale(static_cast<int32_t>(li)) == 1.0f &&
                            batch.kv_pool->v_scale(static_cast<int32_t>(li)) == 1.0f;
    if (fuse_store) {
      split.k_cache = batch.kv_pool->k_buffer(static_cast<int32_t>(li)).data();
      split.v_cache = batch.kv_pool->v_buffer(static_cast<int32_t>(li)).data();
      split.cache_loc = store_slots;
      split.num_slots = batch.kv_pool->num_slots();
    }
    ops::split_qkv_rope(platform_, split);
    if (fam.qk_norm) {
      norm_rows(w.q.data(), nullptr, w.q.data(), l.q_norm, n * heads, c.head_dim);
      norm_rows(w.k.data(), nullptr, w.k.data(), l.k_norm, n * kv_heads, c.head_dim);
      ops::rope(platform_, {.q = w.q.data(),
                            .k = w.k.data(),
                            .dtype = dtype_,
                            .positions = positions,
                            .inv_freq = inv_freq,
                            .rope_rows = rope.length_dependent ? rope_rows : nullptr,
                            .attention_factor = rope.attention_factor,
                            .num_tokens = n,
                            .q_stride = qd,
                            .k_stride = static_cast<int64_t>(kv_heads) * c.head_dim,
                            .num_heads = heads,
                            .num_kv_heads = kv_heads,
                            .head_dim = c.head_dim,
                            .rotary_dim = c.head_dim});
    }
    const attention::AttentionLayer layer{.layer_id = static_cast<int32_t>(li),
                                          .num_heads = heads,
                                          .num_kv_heads = kv_heads,
                                          .head_dim = c.head_dim,
                                          .scaling = fam.attention_scaling,
                                          .window_left = fam.window_left[li],
                                          .logit_softcap = fam.attn_logit_softcap};
    const attention::AttentionIO io{.q = w.q.data(),
                                    .k = w.k.data(),
                                    .v = w.v.data(),
                                    .out = w.attn.data(),
                                    .dtype = dtype_,
                                    .new_kv_rows = new_rows};
    if (caller_stores && !fuse_store) attention::store_kv(backend, io, layer, batch);
    KV_RETURN_IF_ERROR(backend.forward(io, layer, batch));
    gemm(w.attn, l.o_proj, nullptr, w.hidden, n, h, qd);
    KV_RETURN_IF_ERROR(all_reduce(w.hidden, n * h));
    if (fam.sandwich_norms) {
      // Gemma: the attention output is normed before it joins the residual, which the
      // pre-feedforward norm then normalizes for the MLP; the MLP output is normed too (it
      // joins the residual at the next layer's input norm).
      rms_norm(w.hidden, nullptr, w.hidden, l.post_attention_layernorm);
    }
    // The attention output joins the residual stream; the MLP's norm, gate_up_proj and its gated
    // activation.
    normed_linear(w.hidden, /*add_residual=*/true,
                  fam.sandwich_norms ? l.pre_feedforward_layernorm : l.post_attention_layernorm,
                  l.gate_up_proj, nullptr, w.act, 2 * inter, /*gated=*/true);
    gemm(w.act, l.down_proj, nullptr, w.hidden, n, h, inter);
    KV_RETURN_IF_ERROR(all_reduce(w.hidden, n * h));
    if (fam.sandwich_norms) rms_norm(w.hidden, nullptr, w.hidden, l.post_feedforward_layernorm);
  }
  // The last MLP output joins the residual, the final norm runs, and the rows whose logits are
  // wanted are gathered (an embedding lookup into the normed activations).
  rms_norm(w.hidden, &w.residual, w.normed, final_norm_);
  ops::embedding(platform_, {.table = w.normed.data(),
                             .ids = logits_indices,
                             .out = w.last.data(),
                             .dtype = dtype_,
                             .num_tokens = rows,
                             .hidden = h,
                             .vocab = n});
  const Tensor& head = lm_head_.empty() ? embed_tokens_ : lm_head_;
  float* logits = host_logits != nullptr ? host_logits : w.logits.data_as<float>();
  // Each rank computes the columns of its vocabulary rows into the full-width rows; with more
  // than one rank the other columns are zeros and the sum over the ranks is the whole row, exact
  // (x + 0 = x): rank 0 samples from it.
  if (comm_ != nullptr && rows > 0) {
    platform_.memset(logits, 0, static_cast<size_t>(rows) * c.vocab_size * sizeof(float));
  }
  ops::gemm(platform_, {.a = w.last.data(),
                        .b = head.data(),
                        .c = logits + shard_.vocab_start,
                        .dtype = dtype_,
                        .c_f32 = true,
                        .m = rows,
                        .n = shard_.vocab,
                        .k = h,
                        .lda = h,
                        .ldb = h,
                        .ldc = c.vocab_size});
  if (comm_ != nullptr && rows > 0) {
    KV_RETURN_IF_ERROR(comm_->all_reduce_sum(logits, rows * c.vocab_size, DType::kF32,
                                             platform_.current_stream()));
  }
  if (fam.final_logit_softcap > 0.0f) {
    ops::softcap(platform_,
                 {.x = logits, .rows = rows, .cols = c.vocab_size, .cap = fam.final_logit_softcap});
  }
  return Status::ok();
}

Status CausalLM::all_reduce(const Tensor& t, int64_t count) {
  if (comm_ == nullptr) return Status::ok();
  return comm_->all_reduce_sum(t.data(), count, dtype_, platform_.current_stream());
}

Status CausalLM::forward(const mem::ForwardBatch& batch, attention::AttentionBackend& backend,
                         std::vector<float>& logits) {
  const auto rows = static_cast<int64_t>(batch.logits_indices.size());
  logits.resize(static_cast<size_t>(rows) * config_.vocab_size);
  KV_ASSIGN_OR_RETURN(const mem::DeviceBatchInts in, upload_eager(batch));
  if (platform_.device().is_cpu()) return run(batch, backend, *ws_, in, logits.data());
  const Status s = run(batch, backend, *ws_, in, nullptr);
  if (s.is_ok()) {
    platform_.copy(logits.data(), ws_->logits.data(), logits.size() * sizeof(float),
                   platform::CopyKind::kDeviceToHost);
  }
  platform_.synchronize();  // a failed forward's queued work finishes before its buffers go
  return s;
}

Status CausalLM::forward_greedy(const mem::ForwardBatch& batch,
                                attention::AttentionBackend& backend,
                                std::vector<int32_t>& tokens) {
  const auto rows = static_cast<int64_t>(batch.logits_indices.size());
  const int64_t vocab = config_.vocab_size;
  tokens.resize(rows);
  if (platform_.device().is_cpu()) {
    std::vector<float> logits;
    KV_RETURN_IF_ERROR(forward(batch, backend, logits));
    ops::argmax_rows(platform_, logits.data(), rows, vocab, tokens.data());
    return Status::ok();
  }
  KV_ASSIGN_OR_RETURN(const mem::DeviceBatchInts in, upload_eager(batch));
  const Status s = run(batch, backend, *ws_, in, nullptr);
  if (s.is_ok()) {
    ops::argmax_rows(platform_, ws_->logits.data_as<float>(), rows, vocab,
                     ws_->greedy.data_as<int32_t>());
    platform_.copy(tokens.data(), ws_->greedy.data(), rows * sizeof(int32_t),
                   platform::CopyKind::kDeviceToHost);
  }
  platform_.synchronize();
  return s;
}

Result<float*> CausalLM::forward_on_device(const mem::ForwardBatch& batch,
                                           attention::AttentionBackend& backend) {
  KV_CHECK(!platform_.device().is_cpu(), "forward_on_device: the CPU forward writes host logits");
  KV_ASSIGN_OR_RETURN(const mem::DeviceBatchInts in, upload_eager(batch));
  KV_RETURN_IF_ERROR(run(batch, backend, *ws_, in, nullptr));
  return ws_->logits.data_as<float>();
}

Status CausalLM::reserve_static_workspace(int64_t max_tokens) {
  if (platform_.device().is_cpu()) {
    return make_status(StatusCode::kUnimplemented, "the CPU platform has no device-only forward");
  }
  KV_CHECK(static_ws_ == nullptr, "the static workspace is sized once");
  auto ws = std::make_unique<Workspace>();
  KV_RETURN_IF_ERROR(ws->reserve(platform_, local_, dtype_, max_tokens));
  KV_RETURN_IF_ERROR(ws->reserve_logits(platform_, config_.vocab_size, max_tokens));
  static_ws_ = std::move(ws);
  return Status::ok();
}

void CausalLM::forward_static(const mem::ForwardBatch& batch, attention::AttentionBackend& backend,
                              const int32_t* device_ints) {
  KV_CHECK(static_ws_ != nullptr, "reserve_static_workspace first");
  KV_CHECK(!rope_length_dependent_, "a static forward of a length-dependent rope");
  const auto rows = static_cast<int64_t>(batch.logits_indices.size());
  backend.launch_decode_graph_metadata();
  // The static workspace and the backend's graph buffers are sized before capture: nothing grows.
  const Status s =
      run(batch, backend, *static_ws_, mem::batch_ints_at(batch, device_ints), nullptr);
  KV_CHECK(s.is_ok(), "a static forward: {}", s.to_string());
  ops::argmax_rows(platform_, static_ws_->logits.data_as<float>(), rows, config_.vocab_size,
                   static_ws_->greedy.data_as<int32_t>());
}

const float* CausalLM::static_logits() const {
  return static_ws_->logits.data_as<const float>();
}

float* CausalLM::static_logits() {
  return static_ws_->logits.data_as<float>();
}

const int32_t* CausalLM::static_argmax() const {
  return static_ws_->greedy.data_as<const int32_t>();
}

}  // namespace kvserve::model
