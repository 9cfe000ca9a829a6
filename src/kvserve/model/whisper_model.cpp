#include "kvserve/model/whisper_model.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cmath>
#include <cstring>
#include <string>

#include "kvserve/platform/ops/gemm.h"
#include "kvserve/platform/ops/layer_ops.h"
#include "kvserve/platform/ops/whisper_ops.h"

namespace kvserve::model {

struct WhisperModel::Norm {
  Tensor weight, bias;  // [d_model]
};

struct WhisperModel::EncoderLayer {
  Tensor qkv_w, qkv_b;  // [3 * d, d], [3 * d] (k_proj has no bias: zeros)
  Tensor o_w, o_b;
  Norm attn_norm;
  Tensor fc1_w, fc1_b, fc2_w, fc2_b;
  Norm ffn_norm;
};

struct WhisperModel::DecoderLayer {
  Tensor q_w, q_b, k_w, v_w, v_b, o_w, o_b;  // self-attention
  Norm self_norm;
  Tensor cq_w, cq_b, ck_w, cv_w, cv_b, co_w, co_b;  // cross-attention (encoder_attn)
  Norm cross_norm;
  Tensor fc1_w, fc1_b, fc2_w, fc2_b;
  Norm ffn_norm;
};

// Activations, grown to the largest call seen.
struct WhisperModel::Workspace {
  std::vector<float> conv, hidden, delta, normed, qkv, attn, ffn;  // encoder
  std::vector<float> h, d, n, q, k, v, a, f, ck, cv, last;         // decoder
};

namespace {

std::string shape_str(const std::vector<int64_t>& s) {
  return fmt::format("[{}]", fmt::join(s, ", "));
}

// One part of a loaded tensor: a checkpoint tensor, or `zero_rows` rows of zeros (the missing
// k_proj bias of a merged q/k/v bias).
struct Part {
  std::string name;
  int64_t zero_rows = 0;
};

// Copies checkpoint tensors (any float dtype) into consecutive row blocks of one f32 tensor.
class Loader {
 public:
  Loader(const WeightStore& store, platform::Platform& p) : store_(store), platform_(p) {}

  Result<Tensor> load(const std::string& name, std::vector<int64_t> shape) {
    return load_parts({Part{name}}, std::move(shape));
  }

  Result<Tensor> load_parts(const std::vector<Part>& parts, std::vector<int64_t> shape) {
    KV_ASSIGN_OR_RETURN(Tensor out, platform_.empty(DType::kF32, shape, /*zero=*/true));
    int64_t row_elems = 1;
    for (size_t i = 1; i < shape.size(); ++i)
      row_elems *= shape[i];
    int64_t row = 0;
    for (const Part& part : parts) {
      if (part.name.empty()) {
        row += part.zero_rows;
        continue;
      }
      KV_ASSIGN_OR_RETURN(WeightView w, store_.get(part.name));
      if (!is_floating(w.dtype) || is_float8(w.dtype)) {
        return invalid_argument("{}: tensor {} has dtype {}; expected bf16, f16 or f32", w.file,
                                part.name, dtype_name(w.dtype));
      }
      std::vector<int64_t> expected = shape;
      if (parts.size() > 1) expected[0] = w.shape.empty() ? 0 : w.shape[0];
      const bool ok = w.shape.size() == shape.size() &&
                      std::equal(w.shape.begin() + 1, w.shape.end(), shape.begin() + 1) &&
                      row + w.shape[0] <= shape[0] && (parts.size() > 1 || w.shape == shape);
      if (!ok) {
        return invalid_argument("{}: tensor {} has shape {}, expected {}", w.file, part.name,
                                shape_str(w.shape), shape_str(expected));
      }
      const int64_t n = w.numel();
      host_.resize(n);
      convert_elements(w.data, w.dtype, host_.data(), DType::kF32, n);
      platform_.copy(out.data_as<float>() + row * row_elems, host_.data(), n * sizeof(float),
                     platform::CopyKind::kHostToDevice);
      row += w.shape[0];
      bytes_ += n * sizeof(float);
    }
    KV_CHECK_EQ(row, shape[0], "parts do not fill the tensor");
    return out;
  }

  size_t bytes() const { return bytes_; }

 private:
  const WeightStore& store_;
  platform::Platform& platform_;
  std::vector<float> host_;
  size_t bytes_ = 0;
};

template <typename T>
T* grow(std::vector<T>& v, int64_t n) {
  if (static_cast<int64_t>(v.size()) < n) v.resize(n);
  return v.data();
}

}  // namespace

WhisperModel::WhisperModel(const WhisperConfig& config, platform::Platform& platform)
    : config_(config), platform_(platform), ws_(std::make_unique<Workspace>()) {}

WhisperModel::~WhisperModel() = default;

Result<std::unique_ptr<WhisperModel>> WhisperModel::load(const WhisperConfig& c,
                                                         const WeightStore& weights,
                                                         platform::Platform& platform) {
  if (!platform.device().is_cpu()) {
    return make_status(StatusCode::kUnimplemented,
                       "the Whisper model runs on the CPU platform only so far (asked for {})",
                       platform.device().to_string());
  }
  std::unique_ptr<WhisperModel> m(new WhisperModel(c, platform));
  Loader l(weights, platform);
  const int64_t d = c.d_model;
  const auto norm = [&](const std::string& p, Norm& out) -> Status {
    KV_ASSIGN_OR_RETURN(out.weight, l.load(p + ".weight", {d}));
    KV_ASSIGN_OR_RETURN(out.bias, l.load(p + ".bias", {d}));
    return Status::ok();
  };
  const std::string enc = "model.encoder.";
  KV_ASSIGN_OR_RETURN(m->conv1_w_, l.load(enc + "conv1.weight", {d, c.num_mel_bins, 3}));
  KV_ASSIGN_OR_RETURN(m->conv1_b_, l.load(enc + "conv1.bias", {d}));
  KV_ASSIGN_OR_RETURN(m->conv2_w_, l.load(enc + "conv2.weight", {d, d, 3}));
  KV_ASSIGN_OR_RETURN(m->conv2_b_, l.load(enc + "conv2.bias", {d}));
  KV_ASSIGN_OR_RETURN(m->encoder_positions_,
                      l.load(enc + "embed_positions.weight", {c.max_source_positions, d}));
  m->encoder_layers_.resize(c.encoder_layers);
  for (int32_t i = 0; i < c.encoder_layers; ++i) {
    EncoderLayer& e = m->encoder_layers_[i];
    const std::string p = fmt::format("{}layers.{}.", enc, i);
    const std::string a = p + "self_attn.";
    KV_ASSIGN_OR_RETURN(
        e.qkv_w, l.load_parts({{a + "q_proj.weight"}, {a + "k_proj.weight"}, {a + "v_proj.weight"}},
                              {3 * d, d}));
    KV_ASSIGN_OR_RETURN(e.qkv_b,
                        l.load_parts({{a + "q_proj.bias"}, {"", d}, {a + "v_proj.bias"}}, {3 * d}));
    KV_ASSIGN_OR_RETURN(e.o_w, l.load(a + "out_proj.weight", {d, d}));
    KV_ASSIGN_OR_RETURN(e.o_b, l.load(a + "out_proj.bias", {d}));
    KV_RETURN_IF_ERROR(norm(p + "self_attn_layer_norm", e.attn_norm));
    KV_ASSIGN_OR_RETURN(e.fc1_w, l.load(p + "fc1.weight", {c.encoder_ffn_dim, d}));
    KV_ASSIGN_OR_RETURN(e.fc1_b, l.load(p + "fc1.bias", {c.encoder_ffn_dim}));
    KV_ASSIGN_OR_RETURN(e.fc2_w, l.load(p + "fc2.weight", {d, c.encoder_ffn_dim}));
    KV_ASSIGN_OR_RETURN(e.fc2_b, l.load(p + "fc2.bias", {d}));
    KV_RETURN_IF_ERROR(norm(p + "final_layer_norm", e.ffn_norm));
  }
  m->encoder_norm_ = std::make_unique<Norm>();
  KV_RETURN_IF_ERROR(norm(enc + "layer_norm", *m->encoder_norm_));

  const std::string dec = "model.decoder.";
  KV_ASSIGN_OR_RETURN(m->embed_tokens_, l.load(dec + "embed_tokens.weight", {c.vocab_size, d}));
  KV_ASSIGN_OR_RETURN(m->decoder_positions_,
                      l.load(dec + "embed_positions.weight", {c.max_target_positions, d}));
  m->decoder_layers_.resize(c.decoder_layers);
  for (int32_t i = 0; i < c.decoder_layers; ++i) {
    DecoderLayer& e = m->decoder_layers_[i];
    const std::string p = fmt::format("{}layers.{}.", dec, i);
    const std::string s = p + "self_attn.";
    const std::string x = p + "encoder_attn.";
    KV_ASSIGN_OR_RETURN(e.q_w, l.load(s + "q_proj.weight", {d, d}));
    KV_ASSIGN_OR_RETURN(e.q_b, l.load(s + "q_proj.bias", {d}));
    KV_ASSIGN_OR_RETURN(e.k_w, l.load(s + "k_proj.weight", {d, d}));
    KV_ASSIGN_OR_RETURN(e.v_w, l.load(s + "v_proj.weight", {d, d}));
    KV_ASSIGN_OR_RETURN(e.v_b, l.load(s + "v_proj.bias", {d}));
    KV_ASSIGN_OR_RETURN(e.o_w, l.load(s + "out_proj.weight", {d, d}));
    KV_ASSIGN_OR_RETURN(e.o_b, l.load(s + "out_proj.bias", {d}));
    KV_RETURN_IF_ERROR(norm(p + "self_attn_layer_norm", e.self_norm));
    KV_ASSIGN_OR_RETURN(e.cq_w, l.load(x + "q_proj.weight", {d, d}));
    KV_ASSIGN_OR_RETURN(e.cq_b, l.load(x + "q_proj.bias", {d}));
    KV_ASSIGN_OR_RETURN(e.ck_w, l.load(x + "k_proj.weight", {d, d}));
    KV_ASSIGN_OR_RETURN(e.cv_w, l.load(x + "v_proj.weight", {d, d}));
    KV_ASSIGN_OR_RETURN(e.cv_b, l.load(x + "v_proj.bias", {d}));
    KV_ASSIGN_OR_RETURN(e.co_w, l.load(x + "out_proj.weight", {d, d}));
    KV_ASSIGN_OR_RETURN(e.co_b, l.load(x + "out_proj.bias", {d}));
    KV_RETURN_IF_ERROR(norm(p + "encoder_attn_layer_norm", e.cross_norm));
    KV_ASSIGN_OR_RETURN(e.fc1_w, l.load(p + "fc1.weight", {c.decoder_ffn_dim, d}));
    KV_ASSIGN_OR_RETURN(e.fc1_b, l.load(p + "fc1.bias", {c.decoder_ffn_dim}));
    KV_ASSIGN_OR_RETURN(e.fc2_w, l.load(p + "fc2.weight", {d, c.decoder_ffn_dim}));
    KV_ASSIGN_OR_RETURN(e.fc2_b, l.load(p + "fc2.bias", {d}));
    KV_RETURN_IF_ERROR(norm(p + "final_layer_norm", e.ffn_norm));
  }
  m->decoder_norm_ = std::make_unique<Norm>();
  KV_RETURN_IF_ERROR(norm(dec + "layer_norm", *m->decoder_norm_));
  m->weight_bytes_ = l.bytes();
  return m;
}

void WhisperModel::linear(const float* a, const Tensor& w, const Tensor* bias, float* out,
                          int64_t rows, int64_t cols, int64_t k, int64_t lda) {
  ops::gemm(platform_, {.a = a,
                        .b = w.data(),
                        .bias = bias != nullptr && !bias->empty() ? bias->data() : nullptr,
                        .c = out,
                        .dtype = DType::kF32,
                        .m = rows,
                        .n = cols,
                        .k = k,
                        .lda = lda,
                        .ldb = k,
                        .ldc = cols});
}

void WhisperModel::layer_norm(const float* x, float* residual, const Norm& norm, float* out,
                              int64_t rows) {
  ops::layer_norm(platform_, {.x = x,
                              .residual = residual,
                              .out = out,
                              .weight = norm.weight.data(),
                              .bias = norm.bias.data(),
                              .dtype = DType::kF32,
                              .rows = rows,
                              .cols = config_.d_model,
                              .x_stride = config_.d_model,
                              .eps = static_cast<float>(config_.layer_norm_eps)});
}

Status WhisperModel::encode(std::span<const float> features, std::vector<float>& out) {
  const WhisperConfig& c = config_;
  const int64_t frames = c.input_frames();
  const int64_t mels = c.num_mel_bins;
  if (static_cast<int64_t>(features.size()) != mels * frames) {
    return invalid_argument(
        "Whisper features: expected [{}, {}] ({} values), got {} values (the encoder takes "
        "exactly {} frames: pad or cut the audio to 30 s)",
        mels, frames, mels * frames, features.size(), frames);
  }
  const int64_t d = c.d_model;
  const int64_t s = c.max_source_positions;
  const int64_t ffn = c.encoder_ffn_dim;
  Workspace& w = *ws_;
  float* conv = grow(w.conv, frames * d);
  float* hidden = grow(w.hidden, s * d);
  float* delta = grow(w.delta, s * d);
  float* normed = grow(w.normed, s * d);
  float* qkv = grow(w.qkv, s * 3 * d);
  float* attn = grow(w.attn, s * d);
  float* f = grow(w.ffn, s * ffn);

  ops::conv1d(platform_, {.x = features.data(),
                          .weight = conv1_w_.data(),
                          .bias = conv1_b_.data(),
                          .out = conv,
                          .dtype = DType::kF32,
                          .in_channels = mels,
                          .in_len = frames,
                          .out_channels = d,
                          .x_t_stride = 1,
                          .x_c_stride = frames,
                          .kernel_size = 3,
                          .stride = 1,
                          .padding = 1});
  ops::gelu(platform_, {.x = conv, .out = conv, .dtype = DType::kF32, .n = frames * d});
  const ops::Conv1dParams conv2{.x = conv,
                                .weight = conv2_w_.data(),
                                .bias = conv2_b_.data(),
                                .out = hidden,
                                .dtype = DType::kF32,
                                .in_channels = d,
                                .in_len = frames,
                                .out_channels = d,
                                .x_t_stride = d,
                                .x_c_stride = 1,
                                .kernel_size = 3,
                                .stride = 2,
                                .padding = 1};
  KV_CHECK_EQ(conv2.out_len(), s, "conv2 output length");
  ops::conv1d(platform_, conv2);
  ops::gelu(platform_, {.x = hidden, .out = hidden, .dtype = DType::kF32, .n = s * d});
  ops::add_position_embedding(platform_, {.x = hidden,
                                          .table = encoder_positions_.data(),
                                          .positions = nullptr,
                                          .dtype = DType::kF32,
                                          .rows = s,
                                          .cols = d,
                                          .num_positions = c.max_source_positions});

  const int32_t heads = c.encoder_attention_heads;
  const int32_t head_dim = c.encoder_head_dim();
  bool pending = false;  // `delta` holds a sublayer output not yet added to `hidden`
  for (const EncoderLayer& l : encoder_layers_) {
    layer_norm(pending ? delta : hidden, pending ? hidden : nullptr, l.attn_norm, normed, s);
    linear(normed, l.qkv_w, &l.qkv_b, qkv, s, 3 * d, d, d);
    ops::dense_attention(platform_, {.q = qkv,
                                     .k = qkv + d,
                                     .v = qkv + 2 * d,
                                     .out = attn,
                                     .dtype = DType::kF32,
                                     .num_q = s,
                                     .num_kv = s,
                                     .q_stride = 3 * d,
                                     .k_stride = 3 * d,
                                     .v_stride = 3 * d,
                                     .num_heads = heads,
                                     .head_dim = head_dim,
                                     .scaling = 1.0f / std::sqrt(static_cast<float>(head_dim))});
    linear(attn, l.o_w, &l.o_b, delta, s, d, d, d);
    layer_norm(delta, hidden, l.ffn_norm, normed, s);
    linear(normed, l.fc1_w, &l.fc1_b, f, s, ffn, d, d);
    ops::gelu(platform_, {.x = f, .out = f, .dtype = DType::kF32, .n = s * ffn});
    linear(f, l.fc2_w, &l.fc2_b, delta, s, d, ffn, ffn);
    pending = true;
  }
  out.resize(static_cast<size_t>(s * d));
  layer_norm(pending ? delta : hidden, pending ? hidden : nullptr, *encoder_norm_, out.data(), s);
  return Status::ok();
}

void WhisperModel::forward(const ForwardBatch& batch, attention::AttentionBackend& backend,
                           std::vector<float>& logits, std::span<const float> encoder_hidden) {
  const WhisperConfig& c = config_;
  const int64_t n = batch.num_tokens();
  KV_CHECK_GT(n, 0, "empty batch");
  const int64_t d = c.d_model;
  const int64_t ffn = c.decoder_ffn_dim;
  const auto enc_rows = static_cast<int64_t>(batch.encoder_out_cache_loc.size());
  KV_CHECK_EQ(static_cast<int64_t>(encoder_hidden.size()), enc_rows * d,
              "encoder_hidden must hold one d_model row per encoder_out_cache_loc slot");
  Workspace& w = *ws_;
  float* h = grow(w.h, n * d);
  float* delta = grow(w.d, n * d);
  float* normed = grow(w.n, n * d);
  float* q = grow(w.q, n * d);
  float* k = grow(w.k, n * d);
  float* v = grow(w.v, n * d);
  float* attn = grow(w.a, n * d);
  float* f = grow(w.f, n * ffn);
  float* ck = grow(w.ck, enc_rows * d);
  float* cv = grow(w.cv, enc_rows * d);

  // Tokens of requests without an encoder output skip cross-attention.
  std::vector<int64_t> no_encoder_tokens;
  for (int32_t b = 0; b < batch.batch_size(); ++b) {
    if (batch.encoder_len(b) != 0) continue;
    for (int32_t i = 0; i < batch.extend_lens[b]; ++i)
      no_encoder_tokens.push_back(batch.extend_start_loc[b] + i);
  }

  ops::embedding(platform_, {.table = embed_tokens_.data(),
                             .ids = batch.input_ids.data(),
                             .out = h,
                             .dtype = DType::kF32,
                             .num_tokens = n,
                             .hidden = d,
                             .vocab = c.vocab_size});
  if (c.scale_embedding) {
    const float scale = std::sqrt(static_cast<float>(d));
    for (int64_t i = 0; i < n * d; ++i)
      h[i] *= scale;
  }
  ops::add_position_embedding(platform_, {.x = h,
                                          .table = decoder_positions_.data(),
                                          .positions = batch.positions.data(),
                                          .dtype = DType::kF32,
                                          .rows = n,
                                          .cols = d,
                                          .num_positions = c.max_target_positions});

  const int32_t heads = c.decoder_attention_heads;
  const int32_t head_dim = c.decoder_head_dim();
  bool pending = false;
  for (size_t li = 0; li < decoder_layers_.size(); ++li) {
    const DecoderLayer& l = decoder_layers_[li];
    attention::AttentionLayer layer{.layer_id = static_cast<int32_t>(li),
                                    .num_heads = heads,
                                    .num_kv_heads = heads,
                                    .head_dim = head_dim,
                                    .scaling = 1.0f / std::sqrt(static_cast<float>(head_dim)),
                                    .is_cross_attention = false};
    // Causal self-attention over the decoder region.
    layer_norm(pending ? delta : h, pending ? h : nullptr, l.self_norm, normed, n);
    linear(normed, l.q_w, &l.q_b, q, n, d, d, d);
    linear(normed, l.k_w, nullptr, k, n, d, d, d);
    linear(normed, l.v_w, &l.v_b, v, n, d, d, d);
    backend.forward({.q = q, .k = k, .v = v, .out = attn, .dtype = DType::kF32}, layer, batch);
    linear(attn, l.o_w, &l.o_b, delta, n, d, d, d);
    // Cross-attention over the encoder region; its K/V are stored only when computed here.
    layer_norm(delta, h, l.cross_norm, normed, n);
    linear(normed, l.cq_w, &l.cq_b, q, n, d, d, d);
    if (enc_rows > 0) {
      linear(encoder_hidden.data(), l.ck_w, nullptr, ck, enc_rows, d, d, d);
      linear(encoder_hidden.data(), l.cv_w, &l.cv_b, cv, enc_rows, d, d, d);
    }
    layer.is_cross_attention = true;
    backend.forward({.q = q,
                     .k = enc_rows > 0 ? ck : nullptr,
                     .v = enc_rows > 0 ? cv : nullptr,
                     .out = attn,
                     .dtype = DType::kF32},
                    layer, batch);
    linear(attn, l.co_w, &l.co_b, delta, n, d, d, d);
    for (const int64_t t : no_encoder_tokens)
      std::memset(delta + t * d, 0, sizeof(float) * d);
    // Feed-forward.
    layer_norm(delta, h, l.ffn_norm, normed, n);
    linear(normed, l.fc1_w, &l.fc1_b, f, n, ffn, d, d);
    ops::gelu(platform_, {.x = f, .out = f, .dtype = DType::kF32, .n = n * ffn});
    linear(f, l.fc2_w, &l.fc2_b, delta, n, d, ffn, ffn);
    pending = true;
  }
  // Final norm only for the rows whose logits are wanted.
  const auto rows = static_cast<int64_t>(batch.logits_indices.size());
  float* last = grow(w.last, rows * d);
  for (int64_t i = 0; i < rows; ++i) {
    const int32_t t = batch.logits_indices[i];
    KV_CHECK(t >= 0 && t < n, "logits index {} of {} tokens", t, n);
    for (int64_t j = 0; j < d; ++j)
      last[i * d + j] = h[t * d + j] + (pending ? delta[t * d + j] : 0.0f);
  }
  layer_norm(last, nullptr, *decoder_norm_, last, rows);
  logits.resize(static_cast<size_t>(rows) * c.vocab_size);
  linear(last, embed_tokens_, nullptr, logits.data(), rows, c.vocab_size, d, d);
}

}  // namespace kvserve::model
