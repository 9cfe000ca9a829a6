#include "kvserve/model/whisper_model.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <string>
#include <tuple>

#include "kvserve/attention/capabilities.h"
#include "kvserve/platform/ops/gemm.h"
#include "kvserve/platform/ops/layer_ops.h"
#include "kvserve/platform/ops/paged_prefill.h"
#include "kvserve/platform/ops/varlen_attention.h"
#include "kvserve/platform/ops/whisper_ops.h"

namespace kvserve::model {

struct WhisperModel::Norm {
  Tensor weight, bias;  // [d_model]
};

// A projection: weight [out, in], bias [out] (empty where the checkpoint has none).
struct WhisperModel::Linear {
  Tensor w, b;
};

// A pre-LN attention sublayer: <name>_layer_norm, then <name>.{q,k,v,out}_proj. The encoder
// stacks q/k/v into `qkv` (one GEMM); the decoder keeps them apart (cross-attention projects
// the queries and the keys/values from different inputs).
struct WhisperModel::Attention {
  Norm norm;
  Linear q, k, v;
  Linear qkv;  // [3 * d, d], bias [3 * d] (k_proj has no bias: zeros)
  Linear o;
};

// The pre-LN feed-forward sublayer: final_layer_norm, fc1, GELU, fc2.
struct WhisperModel::Ffn {
  Norm norm;
  Linear fc1, fc2;
};

struct WhisperModel::EncoderLayer {
  Attention self_attn;
  Ffn ffn;
};

struct WhisperModel::DecoderLayer {
  Attention self_attn;
  Attention cross_attn;  // encoder_attn
  Ffn ffn;
};

// Activations in the compute dtype on the platform, grown to the largest call seen: the encoder's
// (fixed size) and the decoder's (per batch), the batch's integers and the logits.
struct WhisperModel::Workspace {
  bool encoder_ready = false;
  Tensor features;  // [mels, frames] in the compute dtype (off the CPU)
  Tensor conv, col, hidden, delta, normed, qkv, attn, ffn, encoded;
  // i32 {0, s, s} on the device: the encoder's one sequence for the tensor-core attention
  // (qo_indptr {0, s}, its K/V rows from 0, kv_lens {s}).
  Tensor encoder_seq;
  int64_t tokens = 0;
  Tensor h, d, n, q, k, v, a, f;
  int64_t encoder_rows = 0;
  Tensor ck, cv;
  int64_t logit_rows = 0;
  Tensor last_h, last_d, last;
  Tensor logits;  // f32 [logit_rows, vocab] off the CPU (the CPU writes the caller's vector)
  Tensor ints;    // i32: input_ids | positions | logits_indices
  int64_t ints_size = 0;
  std::vector<int32_t> host_ints;
  std::vector<uint8_t> host;  // features or encoder output in transit
};

namespace {

// Grows `t` to [rows, cols] of `dt` when it holds fewer elements (contents are not kept).
Status grow(platform::Platform& p, Tensor& t, DType dt, int64_t rows, int64_t cols) {
  if (!t.empty() && t.numel() >= rows * cols) return Status::ok();
  t = Tensor();  // free the smaller one first
  KV_ASSIGN_OR_RETURN(t, p.empty(dt, {std::max<int64_t>(rows, 1), cols}));
  return Status::ok();
}

void check_reserved(const Status& s) {
  KV_CHECK(s.is_ok(), "Whisper activation memory: {}", s.to_string());
}

// f32 on the CPU (exact against the float64 references), bf16 on CUDA.
DType compute_dtype_of(const platform::Platform& p) {
  return p.device().is_cpu() ? DType::kF32 : DType::kBF16;
}

std::string shape_str(const std::vector<int64_t>& s) {
  return fmt::format("[{}]", fmt::join(s, ", "));
}

// One row block of a loaded tensor: checkpoint tensor `name` of `rows` rows, or `rows` rows of
// zeros when `name` is empty (the missing k_proj bias of a stacked q/k/v bias).
struct Part {
  std::string name;
  int64_t rows = 0;
};

// Copies checkpoint tensors (any float dtype) into consecutive row blocks of one tensor of the
// compute dtype on the platform, through f32 on the host (exact for every source dtype).
class Loader {
 public:
  Loader(const checkpoint::WeightStore& store, platform::Platform& p, DType dtype)
      : store_(store), platform_(p), dtype_(dtype) {}

  // `scale` multiplies every element in f32 (the pre-scaled embedding table).
  Result<Tensor> load(const std::string& name, std::vector<int64_t> shape, float scale = 1.0f) {
    const int64_t rows = shape.at(0);
    return load_parts({Part{name, rows}}, std::move(shape), scale);
  }

  // Part i must have shape [parts[i].rows, shape[1:]...]; the parts' rows add up to shape[0].
  Result<Tensor> load_parts(const std::vector<Part>& parts, std::vector<int64_t> shape,
                            float scale = 1.0f) {
    KV_ASSIGN_OR_RETURN(Tensor out, platform_.empty(dtype_, shape, /*zero=*/true));
    const size_t elem = dtype_size(dtype_);
    int64_t row_elems = 1;
    for (size_t i = 1; i < shape.size(); ++i)
      row_elems *= shape[i];
    int64_t row = 0;
    for (const Part& part : parts) {
      if (part.name.empty()) {
        row += part.rows;
        continue;
      }
      KV_ASSIGN_OR_RETURN(checkpoint::WeightView w, store_.get(part.name));
      if (!is_floating(w.dtype) || is_float8(w.dtype)) {
        return invalid_argument("{}: tensor {} has dtype {}; expected bf16, f16 or f32", w.file,
                                part.name, dtype_name(w.dtype));
      }
      std::vector<int64_t> expected = shape;
      expected[0] = part.rows;
      if (w.shape != expected) {
        return invalid_argument("{}: tensor {} has shape {}, expected {}", w.file, part.name,
                                shape_str(w.shape), shape_str(expected));
      }
      const int64_t n = w.numel();
      host_.resize(n);
      convert_elements(w.data, w.dtype, host_.data(), DType::kF32, n);
      if (scale != 1.0f) {
        for (float& x : host_)
          x *= scale;
      }
      const void* src = host_.data();
      if (dtype_ != DType::kF32) {
        converted_.resize(n * elem);
        convert_elements(host_.data(), DType::kF32, converted_.data(), dtype_, n);
        src = converted_.data();
      }
      platform_.copy(out.data_as<uint8_t>() + row * row_elems * elem, src, n * elem,
                     platform::CopyKind::kHostToDevice);
      row += part.rows;
      bytes_ += n * elem;
    }
    KV_CHECK_EQ(row, shape[0], "parts do not fill the tensor");
    return out;
  }

  size_t bytes() const { return bytes_; }

 private:
  const checkpoint::WeightStore& store_;
  platform::Platform& platform_;
  DType dtype_;
  std::vector<float> host_;
  std::vector<uint8_t> converted_;
  size_t bytes_ = 0;
};

// WhisperAttention's input projections, in the order the encoder stacks them; k_proj has no bias.
struct Projection {
  const char* name;
  bool bias;
};
constexpr std::array<Projection, 3> kQkvProjections{
    {{"q_proj", true}, {"k_proj", false}, {"v_proj", true}}};

}  // namespace

WhisperModel::WhisperModel(const checkpoint::WhisperConfig& config, platform::Platform& platform)
    : config_(config),
      platform_(platform),
      dtype_(compute_dtype_of(platform)),
      ws_(std::make_unique<Workspace>()) {}

WhisperModel::~WhisperModel() = default;

Result<std::unique_ptr<WhisperModel>> WhisperModel::load(const checkpoint::WhisperConfig& c,
                                                         const checkpoint::WeightStore& weights,
                                                         platform::Platform& platform) {
  std::unique_ptr<WhisperModel> m(new WhisperModel(c, platform));
  Loader l(weights, platform, m->dtype_);
  const int64_t d = c.d_model;
  // Tensor names are transformers' WhisperForConditionalGeneration state dict.
  const auto load_norm = [&](const std::string& name) -> Result<Norm> {
    Norm n;
    KV_ASSIGN_OR_RETURN(n.weight, l.load(name + ".weight", {d}));
    KV_ASSIGN_OR_RETURN(n.bias, l.load(name + ".bias", {d}));
    return n;
  };
  // The projections `projections` of `prefix` (weights [rows, in] each) stacked into one weight
  // and one bias: zeros for a projection without a bias, empty when none of them has one.
  const auto load_linear = [&](const std::string& prefix, std::span<const Projection> projections,
                               int64_t rows, int64_t in) -> Result<Linear> {
    const auto total = static_cast<int64_t>(projections.size()) * rows;
    std::vector<Part> weight_parts, bias_parts;
    bool any_bias = false;
    for (const Projection& p : projections) {
      weight_parts.push_back({prefix + p.name + ".weight", rows});
      bias_parts.push_back({p.bias ? prefix + p.name + ".bias" : "", rows});
      any_bias = any_bias || p.bias;
    }
    Linear out;
    KV_ASSIGN_OR_RETURN(out.w, l.load_parts(weight_parts, {total, in}));
    if (any_bias) {
      KV_ASSIGN_OR_RETURN(out.b, l.load_parts(bias_parts, {total}));
    }
    return out;
  };
  const auto load_one = [&](const std::string& prefix, const char* name, int64_t rows, int64_t in,
                            bool bias = true) -> Result<Linear> {
    const Projection p{name, bias};
    return load_linear(prefix, std::span(&p, 1), rows, in);
  };
  const auto load_attention = [&](const std::string& layer, const std::string& name,
                                  bool stacked) -> Result<Attention> {
    Attention a;
    const std::string p = layer + name + ".";
    KV_ASSIGN_OR_RETURN(a.norm, load_norm(layer + name + "_layer_norm"));
    if (stacked) {
      KV_ASSIGN_OR_RETURN(a.qkv, load_linear(p, kQkvProjections, d, d));
    } else {
      Linear* separate[] = {&a.q, &a.k, &a.v};
      for (size_t i = 0; i < kQkvProjections.size(); ++i) {
        const Projection& x = kQkvProjections[i];
        KV_ASSIGN_OR_RETURN(*separate[i], load_one(p, x.name, d, d, x.bias));
      }
    }
    KV_ASSIGN_OR_RETURN(a.o, load_one(p, "out_proj", d, d));
    return a;
  };
  const auto load_ffn = [&](const std::string& layer, int64_t dim) -> Result<Ffn> {
    Ffn f;
    KV_ASSIGN_OR_RETURN(f.norm, load_norm(layer + "final_layer_norm"));
    KV_ASSIGN_OR_RETURN(f.fc1, load_one(layer, "fc1", dim, d));
    KV_ASSIGN_OR_RETURN(f.fc2, load_one(layer, "fc2", d, dim));
    return f;
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
    KV_ASSIGN_OR_RETURN(e.self_attn, load_attention(p, "self_attn", /*stacked=*/true));
    KV_ASSIGN_OR_RETURN(e.ffn, load_ffn(p, c.encoder_ffn_dim));
  }
  KV_ASSIGN_OR_RETURN(Norm encoder_norm, load_norm(enc + "layer_norm"));
  m->encoder_norm_ = std::make_unique<Norm>(std::move(encoder_norm));

  const std::string dec = "model.decoder.";
  KV_ASSIGN_OR_RETURN(m->embed_tokens_, l.load(dec + "embed_tokens.weight", {c.vocab_size, d}));
  if (c.scale_embedding) {
    KV_ASSIGN_OR_RETURN(m->embed_scaled_, l.load(dec + "embed_tokens.weight", {c.vocab_size, d},
                                                 std::sqrt(static_cast<float>(d))));
  }
  KV_ASSIGN_OR_RETURN(m->decoder_positions_,
                      l.load(dec + "embed_positions.weight", {c.max_target_positions, d}));
  m->decoder_layers_.resize(c.decoder_layers);
  for (int32_t i = 0; i < c.decoder_layers; ++i) {
    DecoderLayer& e = m->decoder_layers_[i];
    const std::string p = fmt::format("{}layers.{}.", dec, i);
    KV_ASSIGN_OR_RETURN(e.self_attn, load_attention(p, "self_attn", /*stacked=*/false));
    KV_ASSIGN_OR_RETURN(e.cross_attn, load_attention(p, "encoder_attn", /*stacked=*/false));
    KV_ASSIGN_OR_RETURN(e.ffn, load_ffn(p, c.decoder_ffn_dim));
  }
  KV_ASSIGN_OR_RETURN(Norm decoder_norm, load_norm(dec + "layer_norm"));
  m->decoder_norm_ = std::make_unique<Norm>(std::move(decoder_norm));
  m->weight_bytes_ = l.bytes();
  return m;
}

void WhisperModel::linear(const void* a, const Linear& w, void* out, int64_t rows, int64_t cols,
                          int64_t k, int64_t lda) {
  ops::gemm(platform_, {.a = a,
                        .b = w.w.data(),
                        .bias = w.b.empty() ? nullptr : w.b.data(),
                        .c = out,
                        .dtype = dtype_,
                        .m = rows,
                        .n = cols,
                        .k = k,
                        .lda = lda,
                        .ldb = k,
                        .ldc = cols});
}

void WhisperModel::layer_norm(const void* x, void* residual, const Norm& norm, void* out,
                              int64_t rows) {
  ops::layer_norm(platform_, {.x = x,
                              .residual = residual,
                              .out = out,
                              .weight = norm.weight.data(),
                              .bias = norm.bias.data(),
                              .dtype = dtype_,
                              .rows = rows,
                              .cols = config_.d_model,
                              .x_stride = config_.d_model,
                              .eps = static_cast<float>(config_.layer_norm_eps)});
}

void WhisperModel::feed_forward(const Ffn& ffn, void* delta, void* residual, void* normed,
                                void* hidden, int64_t rows, int64_t dim) {
  const int64_t d = config_.d_model;
  layer_norm(delta, residual, ffn.norm, normed, rows);
  linear(normed, ffn.fc1, hidden, rows, dim, d, d);
  ops::gelu(platform_, {.x = hidden, .out = hidden, .dtype = dtype_, .n = rows * dim});
  linear(hidden, ffn.fc2, delta, rows, d, dim, dim);
}

void WhisperModel::reserve_encoder() {
  Workspace& w = *ws_;
  if (w.encoder_ready) return;
  const checkpoint::WhisperConfig& c = config_;
  const int64_t frames = c.input_frames();
  const int64_t mels = c.num_mel_bins;
  const int64_t d = c.d_model;
  const int64_t s = c.max_source_positions;
  const bool on_cpu = platform_.device().is_cpu();
  // im2col of either convolution: [out_len, in_channels * 3] (unused on the CPU).
  const int64_t col = on_cpu ? 1 : std::max(frames * mels * 3, s * d * 3);
  Status st = Status::ok();
  for (auto [t, rows, cols] : {std::tuple{&w.conv, frames, d},
                               {&w.col, int64_t{1}, col},
                               {&w.hidden, s, d},
                               {&w.delta, s, d},
                               {&w.normed, s, d},
                               {&w.qkv, s, 3 * d},
                               {&w.attn, s, d},
                               {&w.ffn, s, int64_t{c.encoder_ffn_dim}},
                               {&w.features, on_cpu ? 1 : mels, on_cpu ? 1 : frames},
                               {&w.encoded, on_cpu ? 1 : s, d}}) {
    if (st.is_ok()) st = grow(platform_, *t, dtype_, rows, cols);
  }
  if (st.is_ok() && encoder_attention_on_tensor_cores()) {
    auto seq = platform_.empty(DType::kI32, {3});
    st = seq.status();
    if (st.is_ok()) {
      w.encoder_seq = std::move(*seq);
      const std::array<int32_t, 3> ints = {0, static_cast<int32_t>(s), static_cast<int32_t>(s)};
      platform_.copy(w.encoder_seq.data(), ints.data(), sizeof(ints),
                     platform::CopyKind::kHostToDevice);
      platform_.synchronize();
    }
  }
  check_reserved(st);
  w.encoder_ready = true;
}

bool WhisperModel::encoder_attention_on_tensor_cores() const {
  const int32_t head_dim = config_.encoder_head_dim();
  return !platform_.device().is_cpu() && dtype_ == DType::kBF16 &&
         std::ranges::find(attention::kPagedKernelHeadDims, head_dim) !=
             std::end(attention::kPagedKernelHeadDims) &&
         config_.d_model % 8 == 0;
}

Status WhisperModel::encode(std::span<const float> features, void* out) {
  const checkpoint::WhisperConfig& c = config_;
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
  const size_t es = dtype_size(dtype_);
  const bool on_cpu = platform_.device().is_cpu();
  Workspace& w = *ws_;
  reserve_encoder();
  // The features in the compute dtype on the device (the CPU reads the caller's span).
  const void* x = features.data();
  if (!on_cpu) {
    w.host.resize(features.size() * es);
    convert_elements(features.data(), DType::kF32, w.host.data(), dtype_,
                     static_cast<int64_t>(features.size()));
    platform_.copy(w.features.data(), w.host.data(), w.host.size(),
                   platform::CopyKind::kHostToDevice);
    x = w.features.data();
  }
  void* conv = w.conv.data();
  void* hidden = w.hidden.data();
  void* delta = w.delta.data();
  void* normed = w.normed.data();
  auto* qkv = w.qkv.data_as<uint8_t>();
  void* attn = w.attn.data();
  void* f = w.ffn.data();

  ops::conv1d(platform_, {.x = x,
                          .weight = conv1_w_.data(),
                          .bias = conv1_b_.data(),
                          .out = conv,
                          .workspace = on_cpu ? nullptr : w.col.data(),
                          .dtype = dtype_,
                          .in_channels = mels,
                          .in_len = frames,
                          .out_channels = d,
                          .x_t_stride = 1,
                          .x_c_stride = frames,
                          .kernel_size = 3,
                          .stride = 1,
                          .padding = 1});
  ops::gelu(platform_, {.x = conv, .out = conv, .dtype = dtype_, .n = frames * d});
  const ops::Conv1dParams conv2{.x = conv,
                                .weight = conv2_w_.data(),
                                .bias = conv2_b_.data(),
                                .out = hidden,
                                .workspace = on_cpu ? nullptr : w.col.data(),
                                .dtype = dtype_,
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
  ops::gelu(platform_, {.x = hidden, .out = hidden, .dtype = dtype_, .n = s * d});
  ops::add_position_embedding(platform_, {.x = hidden,
                                          .table = encoder_positions_.data(),
                                          .positions = nullptr,
                                          .dtype = dtype_,
                                          .rows = s,
                                          .cols = d,
                                          .num_positions = c.max_source_positions});

  const int32_t heads = c.encoder_attention_heads;
  const int32_t head_dim = c.encoder_head_dim();
  bool pending = false;  // `delta` holds a sublayer output not yet added to `hidden`
  for (const EncoderLayer& l : encoder_layers_) {
    const Attention& a = l.self_attn;
    layer_norm(pending ? delta : hidden, pending ? hidden : nullptr, a.norm, normed, s);
    linear(normed, a.qkv, qkv, s, 3 * d, d, d);
    // Every position attends to every position: one sequence, not causal, read in place from the
    // packed q|k|v rows. On CUDA the tensor-core prefill kernel (contiguous K/V, strided rows);
    // elsewhere, and at head dims it lacks, varlen attention.
    if (encoder_attention_on_tensor_cores()) {
      const auto* seq = w.encoder_seq.data_as<int32_t>();
      ops::paged_prefill(platform_, {.q = qkv,
                                     .k_cache = qkv + d * es,
                                     .v_cache = qkv + 2 * d * es,
                                     .qo_indptr = seq,
                                     .page_indptr = seq,
                                     .page_ids = nullptr,
                                     .kv_lens = seq + 2,
                                     .out = attn,
                                     .q_stride = 3 * d,
                                     .kv_stride = 3 * d,
                                     .batch = 1,
                                     .total_q = static_cast<int32_t>(s),
                                     .num_q_heads = heads,
                                     .num_kv_heads = heads,
                                     .head_dim = head_dim,
                                     .page_size = 1,
                                     .causal = false,
                                     .sm_scale = 1.0f / std::sqrt(static_cast<float>(head_dim))});
    } else {
      ops::varlen_attention(platform_, {.q = qkv,
                                        .k = qkv + d * es,
                                        .v = qkv + 2 * d * es,
                                        .out = attn,
                                        .dtype = dtype_,
                                        .num_seqs = 1,
                                        .max_q_len = static_cast<int32_t>(s),
                                        .num_q = s,
                                        .num_kv = s,
                                        .q_stride = 3 * d,
                                        .k_stride = 3 * d,
                                        .v_stride = 3 * d,
                                        .out_stride = d,
                                        .num_heads = heads,
                                        .num_kv_heads = heads,
                                        .head_dim = head_dim,
                                        .scaling = 1.0f / std::sqrt(static_cast<float>(head_dim)),
                                        .causal = false});
    }
    linear(attn, a.o, delta, s, d, d, d);
    feed_forward(l.ffn, delta, hidden, normed, f, s, ffn);
    pending = true;
  }
  layer_norm(pending ? delta : hidden, pending ? hidden : nullptr, *encoder_norm_, out, s);
  return Status::ok();
}

Status WhisperModel::encode(std::span<const float> features, std::vector<float>& out) {
  const int64_t n = int64_t{config_.max_source_positions} * config_.d_model;
  out.resize(static_cast<size_t>(n));
  if (platform_.device().is_cpu()) return encode(features, out.data());
  reserve_encoder();
  KV_RETURN_IF_ERROR(encode(features, ws_->encoded.data()));
  ws_->host.resize(n * dtype_size(dtype_));
  platform_.copy(ws_->host.data(), ws_->encoded.data(), ws_->host.size(),
                 platform::CopyKind::kDeviceToHost);
  platform_.synchronize();
  convert_elements(ws_->host.data(), dtype_, out.data(), DType::kF32, n);
  return Status::ok();
}

Status WhisperModel::forward(const mem::ForwardBatch& batch, attention::AttentionBackend& backend,
                             std::vector<float>& logits, const void* encoder_hidden) {
  const checkpoint::WhisperConfig& c = config_;
  const int64_t n = batch.num_tokens();
  KV_CHECK_GT(n, 0, "empty batch");
  const int64_t d = c.d_model;
  const int64_t ffn = c.decoder_ffn_dim;
  const int64_t vocab = c.vocab_size;
  const auto enc_rows = static_cast<int64_t>(batch.encoder_out_cache_loc.size());
  KV_CHECK(enc_rows == 0 || encoder_hidden != nullptr,
           "{} encoder_out_cache_loc slots but no encoder_hidden", enc_rows);
  const auto rows = static_cast<int64_t>(batch.logits_indices.size());
  for (const int32_t t : batch.logits_indices)
    KV_CHECK(t >= 0 && t < n, "logits index {} of {} tokens", t, n);
  const bool on_cpu = platform_.device().is_cpu();
  const size_t es = dtype_size(dtype_);
  Workspace& w = *ws_;
  Status st = Status::ok();
  if (n > w.tokens) {
    for (auto [t, cols] : {std::pair{&w.h, d},
                           {&w.d, d},
                           {&w.n, d},
                           {&w.q, d},
                           {&w.k, d},
                           {&w.v, d},
                           {&w.a, d},
                           {&w.f, ffn}}) {
      if (st.is_ok()) st = grow(platform_, *t, dtype_, n, cols);
    }
    if (st.is_ok()) w.tokens = n;
  }
  if (st.is_ok() && enc_rows > w.encoder_rows) {
    st = grow(platform_, w.ck, dtype_, enc_rows, d);
    if (st.is_ok()) st = grow(platform_, w.cv, dtype_, enc_rows, d);
    if (st.is_ok()) w.encoder_rows = enc_rows;
  }
  if (st.is_ok() && rows > w.logit_rows) {
    for (Tensor* t : {&w.last_h, &w.last_d, &w.last}) {
      if (st.is_ok()) st = grow(platform_, *t, dtype_, rows, d);
    }
    if (st.is_ok() && !on_cpu) st = grow(platform_, w.logits, DType::kF32, rows, vocab);
    if (st.is_ok()) w.logit_rows = rows;
  }
  if (st.is_ok() && 2 * n + rows > w.ints_size) {
    st = grow(platform_, w.ints, DType::kI32, 1, 2 * n + rows);
    if (st.is_ok()) w.ints_size = 2 * n + rows;
  }
  if (!st.is_ok()) {
    return make_status(st.code(), "Whisper activation memory for {} tokens: {}", n, st.message());
  }

  // The batch's integers reach the device in one copy.
  const mem::DeviceBatchInts in =
      mem::upload_batch_ints(platform_, batch, w.host_ints, w.ints.data_as<int32_t>());
  const int32_t* ids = in.input_ids;
  const int32_t* positions = in.positions;
  const int32_t* logits_indices = in.logits_indices;

  void* h = w.h.data();
  auto* delta = w.d.data_as<uint8_t>();
  void* normed = w.n.data();
  void* q = w.q.data();
  void* k = w.k.data();
  void* v = w.v.data();
  void* attn = w.a.data();
  void* f = w.f.data();
  void* ck = enc_rows > 0 ? w.ck.data() : nullptr;
  void* cv = enc_rows > 0 ? w.cv.data() : nullptr;

  ops::embedding(platform_,
                 {.table = embed_scaled_.empty() ? embed_tokens_.data() : embed_scaled_.data(),
                  .ids = ids,
                  .out = h,
                  .dtype = dtype_,
                  .num_tokens = n,
                  .hidden = d,
                  .vocab = c.vocab_size});
  ops::add_position_embedding(platform_, {.x = h,
                                          .table = decoder_positions_.data(),
                                          .positions = positions,
                                          .dtype = dtype_,
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
    const Attention& sa = l.self_attn;
    layer_norm(pending ? delta : h, pending ? h : nullptr, sa.norm, normed, n);
    linear(normed, sa.q, q, n, d, d, d);
    linear(normed, sa.k, k, n, d, d, d);
    linear(normed, sa.v, v, n, d, d, d);
    const attention::AttentionIO self_io{.q = q, .k = k, .v = v, .out = attn, .dtype = dtype_};
    attention::store_kv(backend, self_io, layer,
                        batch);  // the caller's store path, if the backend's
    KV_RETURN_IF_ERROR(backend.forward(self_io, layer, batch));
    linear(attn, sa.o, delta, n, d, d, d);
    // Cross-attention over the encoder region; its K/V are stored only when computed here.
    const Attention& ca = l.cross_attn;
    layer_norm(delta, h, ca.norm, normed, n);
    linear(normed, ca.q, q, n, d, d, d);
    if (enc_rows > 0) {
      linear(encoder_hidden, ca.k, ck, enc_rows, d, d, d);
      linear(encoder_hidden, ca.v, cv, enc_rows, d, d, d);
    }
    layer.is_cross_attention = true;
    const attention::AttentionIO cross_io{.q = q, .k = ck, .v = cv, .out = attn, .dtype = dtype_};
    attention::store_kv(backend, cross_io, layer, batch);  // nothing when the encoder is cached
    KV_RETURN_IF_ERROR(backend.forward(cross_io, layer, batch));
    linear(attn, ca.o, delta, n, d, d, d);
    // Tokens of requests without an encoder output skip cross-attention.
    for (int32_t b = 0; b < batch.batch_size(); ++b) {
      if (batch.encoder_len(b) != 0 || batch.extend_lens[b] == 0) continue;
      platform_.memset(delta + int64_t{batch.extend_start_loc[b]} * d * es, 0,
                       int64_t{batch.extend_lens[b]} * d * es);
    }
    feed_forward(l.ffn, delta, h, normed, f, n, ffn);
    pending = true;
  }
  // The rows whose logits are wanted are gathered (an embedding lookup into the activations); the
  // last sublayer output joins the residual inside the final norm.
  logits.resize(static_cast<size_t>(rows) * vocab);
  if (rows == 0) return Status::ok();
  const auto gather = [&](const void* table, void* out) {
    ops::embedding(platform_, {.table = table,
                               .ids = logits_indices,
                               .out = out,
                               .dtype = dtype_,
                               .num_tokens = rows,
                               .hidden = d,
                               .vocab = n});
  };
  gather(h, w.last_h.data());
  if (pending) gather(delta, w.last_d.data());
  layer_norm(pending ? w.last_d.data() : w.last_h.data(), pending ? w.last_h.data() : nullptr,
             *decoder_norm_, w.last.data(), rows);
  ops::gemm(platform_, {.a = w.last.data(),
                        .b = embed_tokens_.data(),
                        .c = on_cpu ? logits.data() : w.logits.data(),
                        .dtype = dtype_,
                        .c_f32 = true,
                        .m = rows,
                        .n = vocab,
                        .k = d,
                        .lda = d,
                        .ldb = d,
                        .ldc = vocab});
  if (on_cpu) return Status::ok();
  platform_.copy(logits.data(), w.logits.data(), logits.size() * sizeof(float),
                 platform::CopyKind::kDeviceToHost);
  platform_.synchronize();
  return Status::ok();
}

}  // namespace kvserve::model
