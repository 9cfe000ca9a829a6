#include "kvserve/model/causal_lm.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cmath>
#include <cstring>

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
};

// Activations of one forward, grown to the largest batch seen.
struct CausalLM::Workspace {
  int64_t tokens = 0;
  Tensor hidden, residual, normed, qkv, q, k, v, attn, gate_up, act, last;

  Status reserve(platform::Platform& p, const ModelConfig& c, int64_t n) {
    if (n <= tokens) return Status::ok();
    const int64_t qd = static_cast<int64_t>(c.num_attention_heads) * c.head_dim;
    const int64_t kvd = static_cast<int64_t>(c.num_key_value_heads) * c.head_dim;
    const int64_t h = c.hidden_size;
    const int64_t inter = c.intermediate_size;
    auto alloc = [&](Tensor& t, int64_t cols) -> Status {
      KV_ASSIGN_OR_RETURN(t, p.empty(DType::kF32, {n, cols}));
      return Status::ok();
    };
    KV_RETURN_IF_ERROR(alloc(hidden, h));
    KV_RETURN_IF_ERROR(alloc(residual, h));
    KV_RETURN_IF_ERROR(alloc(normed, h));
    KV_RETURN_IF_ERROR(alloc(qkv, qd + 2 * kvd));
    KV_RETURN_IF_ERROR(alloc(q, qd));
    KV_RETURN_IF_ERROR(alloc(k, kvd));
    KV_RETURN_IF_ERROR(alloc(v, kvd));
    KV_RETURN_IF_ERROR(alloc(attn, qd));
    KV_RETURN_IF_ERROR(alloc(gate_up, 2 * inter));
    KV_RETURN_IF_ERROR(alloc(act, inter));
    KV_RETURN_IF_ERROR(alloc(last, h));
    tokens = n;
    return Status::ok();
  }
};

namespace {

std::string shape_str(const std::vector<int64_t>& s) {
  return fmt::format("[{}]", fmt::join(s, ", "));
}

// Copies checkpoint tensors (any float dtype) into consecutive row blocks of one f32 tensor.
class WeightLoader {
 public:
  WeightLoader(const WeightStore& store, platform::Platform& p) : store_(store), platform_(p) {}

  // One tensor of exactly `shape`.
  Result<Tensor> load(const std::string& name, std::vector<int64_t> shape) {
    return load_concat({name}, shape);
  }

  // Tensors stacked along dim 0 into `shape` (each part has the same trailing dims).
  Result<Tensor> load_concat(const std::vector<std::string>& names, std::vector<int64_t> shape) {
    KV_ASSIGN_OR_RETURN(Tensor out, platform_.empty(DType::kF32, shape));
    int64_t row_elems = 1;
    for (size_t i = 1; i < shape.size(); ++i)
      row_elems *= shape[i];
    int64_t row = 0;
    std::vector<float> host;
    for (const std::string& name : names) {
      KV_ASSIGN_OR_RETURN(WeightView w, store_.get(name));
      if (!is_floating(w.dtype) || is_float8(w.dtype)) {
        return invalid_argument("{}: tensor {} has dtype {}; expected bf16, f16 or f32", w.file,
                                name, dtype_name(w.dtype));
      }
      const bool trailing_ok = w.shape.size() == shape.size() &&
                               std::equal(w.shape.begin() + 1, w.shape.end(), shape.begin() + 1);
      if (!trailing_ok || row + w.shape[0] > shape[0]) {
        std::vector<int64_t> expected = shape;
        if (names.size() > 1 && !w.shape.empty()) expected[0] = w.shape[0];
        return invalid_argument("{}: tensor {} has shape {}, expected {}", w.file, name,
                                shape_str(w.shape), shape_str(expected));
      }
      const int64_t n = w.numel();
      host.resize(n);
      convert_elements(w.data, w.dtype, host.data(), DType::kF32, n);
      platform_.copy(out.data_as<float>() + row * row_elems, host.data(), n * sizeof(float),
                     platform::CopyKind::kHostToDevice);
      row += w.shape[0];
      bytes_ += n * sizeof(float);
    }
    if (row != shape[0]) {
      return invalid_argument("tensors {} stack to {} rows, expected {}", fmt::join(names, ", "),
                              row, shape[0]);
    }
    return out;
  }

  size_t bytes() const { return bytes_; }

 private:
  const WeightStore& store_;
  platform::Platform& platform_;
  size_t bytes_ = 0;
};

}  // namespace

CausalLM::CausalLM(const ModelConfig& config, platform::Platform& platform)
    : config_(config), platform_(platform), ws_(std::make_unique<Workspace>()) {}

CausalLM::~CausalLM() = default;

Result<std::unique_ptr<CausalLM>> CausalLM::load(
    const ModelConfig& c, const WeightStore& weights, platform::Platform& platform,
    const std::function<void(int64_t done, int64_t total)>& on_layer) {
  if (!platform.device().is_cpu()) {
    return make_status(StatusCode::kUnimplemented,
                       "the model runtime runs on the CPU platform only so far (asked for {})",
                       platform.device().to_string());
  }
  std::unique_ptr<CausalLM> m(new CausalLM(c, platform));
  WeightLoader loader(weights, platform);
  const int64_t h = c.hidden_size;
  const int64_t qd = static_cast<int64_t>(c.num_attention_heads) * c.head_dim;
  const int64_t kvd = static_cast<int64_t>(c.num_key_value_heads) * c.head_dim;
  const int64_t inter = c.intermediate_size;
  KV_ASSIGN_OR_RETURN(m->embed_tokens_,
                      loader.load("model.embed_tokens.weight", {c.vocab_size, h}));
  KV_ASSIGN_OR_RETURN(m->final_norm_, loader.load("model.norm.weight", {h}));
  if (!c.tie_word_embeddings) {
    KV_ASSIGN_OR_RETURN(m->lm_head_, loader.load("lm_head.weight", {c.vocab_size, h}));
  }
  const int64_t steps = c.num_hidden_layers + 1;
  if (on_layer) on_layer(1, steps);
  m->layers_.resize(c.num_hidden_layers);
  for (int32_t i = 0; i < c.num_hidden_layers; ++i) {
    Layer& l = m->layers_[i];
    const std::string p = fmt::format("model.layers.{}.", i);
    KV_ASSIGN_OR_RETURN(l.qkv_proj, loader.load_concat({p + "self_attn.q_proj.weight",
                                                        p + "self_attn.k_proj.weight",
                                                        p + "self_attn.v_proj.weight"},
                                                       {qd + 2 * kvd, h}));
    if (c.attention_bias) {
      KV_ASSIGN_OR_RETURN(
          l.qkv_bias, loader.load_concat({p + "self_attn.q_proj.bias", p + "self_attn.k_proj.bias",
                                          p + "self_attn.v_proj.bias"},
                                         {qd + 2 * kvd}));
    }
    KV_ASSIGN_OR_RETURN(l.o_proj, loader.load(p + "self_attn.o_proj.weight", {h, qd}));
    KV_ASSIGN_OR_RETURN(
        l.gate_up_proj,
        loader.load_concat({p + "mlp.gate_proj.weight", p + "mlp.up_proj.weight"}, {2 * inter, h}));
    KV_ASSIGN_OR_RETURN(l.down_proj, loader.load(p + "mlp.down_proj.weight", {h, inter}));
    KV_ASSIGN_OR_RETURN(l.input_layernorm, loader.load(p + "input_layernorm.weight", {h}));
    KV_ASSIGN_OR_RETURN(l.post_attention_layernorm,
                        loader.load(p + "post_attention_layernorm.weight", {h}));
    if (on_layer) on_layer(i + 2, steps);
  }
  m->inv_freq_ = rope_inv_freq(c.rope_theta, c.head_dim, c.rope_scaling);
  m->weight_bytes_ = loader.bytes();
  return m;
}

void CausalLM::forward(const ForwardBatch& batch, attention::AttentionBackend& backend,
                       std::vector<float>& logits) {
  const ModelConfig& c = config_;
  const int64_t n = batch.num_tokens();
  KV_CHECK_GT(n, 0, "empty batch");
  const Status reserved = ws_->reserve(platform_, c, n);
  KV_CHECK(reserved.is_ok(), "activation memory: {}", reserved.to_string());
  Workspace& w = *ws_;
  const int64_t h = c.hidden_size;
  const int32_t heads = c.num_attention_heads;
  const int32_t kv_heads = c.num_key_value_heads;
  const int64_t qd = static_cast<int64_t>(heads) * c.head_dim;
  const int64_t kvd = static_cast<int64_t>(kv_heads) * c.head_dim;
  const int64_t qkv_cols = qd + 2 * kvd;
  const int64_t inter = c.intermediate_size;
  const auto eps = static_cast<float>(c.rms_norm_eps);
  auto* hidden = w.hidden.data_as<float>();
  auto* residual = w.residual.data_as<float>();
  auto* normed = w.normed.data_as<float>();
  auto gemm = [&](const float* a, const Tensor& b, const Tensor* bias, float* out, int64_t rows,
                  int64_t cols, int64_t k) {
    ops::gemm(platform_, {.a = a,
                          .b = b.data(),
                          .bias = bias && !bias->empty() ? bias->data() : nullptr,
                          .c = out,
                          .dtype = DType::kF32,
                          .m = rows,
                          .n = cols,
                          .k = k,
                          .lda = k,
                          .ldb = k,
                          .ldc = cols});
  };

  ops::embedding(platform_, {.table = embed_tokens_.data(),
                             .ids = batch.input_ids.data(),
                             .out = hidden,
                             .dtype = DType::kF32,
                             .num_tokens = n,
                             .hidden = h,
                             .vocab = c.vocab_size});
  std::memcpy(residual, hidden, n * h * sizeof(float));
  for (size_t li = 0; li < layers_.size(); ++li) {
    const Layer& l = layers_[li];
    // Pre-attention norm; from the second layer on, the previous MLP output joins the residual.
    ops::rms_norm(platform_, {.x = li == 0 ? residual : hidden,
                              .residual = li == 0 ? nullptr : residual,
                              .out = normed,
                              .weight = l.input_layernorm.data(),
                              .dtype = DType::kF32,
                              .rows = n,
                              .cols = h,
                              .x_stride = h,
                              .eps = eps});
    auto* qkv = w.qkv.data_as<float>();
    gemm(normed, l.qkv_proj, &l.qkv_bias, qkv, n, qkv_cols, h);
    auto* q = w.q.data_as<float>();
    auto* k = w.k.data_as<float>();
    auto* v = w.v.data_as<float>();
    for (int64_t t = 0; t < n; ++t) {
      std::memcpy(q + t * qd, qkv + t * qkv_cols, qd * sizeof(float));
      std::memcpy(k + t * kvd, qkv + t * qkv_cols + qd, kvd * sizeof(float));
      std::memcpy(v + t * kvd, qkv + t * qkv_cols + qd + kvd, kvd * sizeof(float));
    }
    ops::rope(platform_, {.q = q,
                          .k = k,
                          .dtype = DType::kF32,
                          .positions = batch.positions.data(),
                          .inv_freq = inv_freq_.data(),
                          .num_tokens = n,
                          .q_stride = qd,
                          .k_stride = kvd,
                          .num_heads = heads,
                          .num_kv_heads = kv_heads,
                          .head_dim = c.head_dim,
                          .rotary_dim = c.head_dim});
    const attention::AttentionLayer layer{
        .layer_id = static_cast<int32_t>(li),
        .num_heads = heads,
        .num_kv_heads = kv_heads,
        .head_dim = c.head_dim,
        .scaling = 1.0f / std::sqrt(static_cast<float>(c.head_dim))};
    backend.forward({.q = q, .k = k, .v = v, .out = w.attn.data(), .dtype = DType::kF32}, layer,
                    batch);
    gemm(w.attn.data_as<float>(), l.o_proj, nullptr, hidden, n, h, qd);
    ops::rms_norm(platform_, {.x = hidden,
                              .residual = residual,
                              .out = normed,
                              .weight = l.post_attention_layernorm.data(),
                              .dtype = DType::kF32,
                              .rows = n,
                              .cols = h,
                              .x_stride = h,
                              .eps = eps});
    gemm(normed, l.gate_up_proj, nullptr, w.gate_up.data_as<float>(), n, 2 * inter, h);
    ops::silu_and_mul(platform_, {.x = w.gate_up.data(),
                                  .out = w.act.data(),
                                  .dtype = DType::kF32,
                                  .num_tokens = n,
                                  .inter = inter});
    gemm(w.act.data_as<float>(), l.down_proj, nullptr, hidden, n, h, inter);
  }
  // Final norm only for the rows whose logits are wanted.
  const auto rows = static_cast<int64_t>(batch.logits_indices.size());
  auto* last = w.last.data_as<float>();
  for (int64_t i = 0; i < rows; ++i) {
    const int32_t t = batch.logits_indices[i];
    KV_CHECK(t >= 0 && t < n, "logits index {} of {} tokens", t, n);
    for (int64_t j = 0; j < h; ++j)
      last[i * h + j] = residual[t * h + j] + hidden[t * h + j];
  }
  ops::rms_norm(platform_, {.x = last,
                            .residual = nullptr,
                            .out = last,
                            .weight = final_norm_.data(),
                            .dtype = DType::kF32,
                            .rows = rows,
                            .cols = h,
                            .x_stride = h,
                            .eps = eps});
  logits.resize(static_cast<size_t>(rows) * c.vocab_size);
  const Tensor& head = lm_head_.empty() ? embed_tokens_ : lm_head_;
  gemm(last, head, nullptr, logits.data(), rows, c.vocab_size, h);
}

}  // namespace kvserve::model
