// A float64 reference of WhisperForConditionalGeneration's forward, written for the tests from
// transformers' math (modeling_whisper.py), independent of kvserve's ops, pool and backends:
// plain loops, no KV cache (the decoder recomputes the whole sequence every call).
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "kvserve/checkpoint/weights.h"
#include "kvserve/checkpoint/whisper_config.h"

namespace kvserve::model::testing {

using Vec = std::vector<double>;

class WhisperReference {
 public:
  WhisperReference(const checkpoint::WhisperConfig& c, const checkpoint::WeightStore& store)
      : c_(c), store_(store) {}

  // [max_source_positions, d_model]
  Vec encode(const std::vector<float>& features) {
    const int64_t d = c_.d_model;
    const int64_t frames = c_.input_frames();
    const int64_t s = c_.max_source_positions;
    // conv1 over the channel-major features, GELU.
    Vec x1 = conv(features.data(), c_.num_mel_bins, frames, /*channel_major=*/true, "conv1", 1);
    for (double& v : x1)
      v = gelu(v);
    Vec h = conv_token_major(x1, frames, "conv2", 2);
    for (double& v : h)
      v = gelu(v);
    const Vec& pos = w("model.encoder.embed_positions.weight");
    for (int64_t i = 0; i < s * d; ++i)
      h[i] += pos[i];
    for (int32_t l = 0; l < c_.encoder_layers; ++l) {
      const std::string p = "model.encoder.layers." + std::to_string(l) + ".";
      Vec n = layer_norm(h, s, p + "self_attn_layer_norm");
      const Vec a = attention(n, s, n, s, p + "self_attn.", c_.encoder_attention_heads, false);
      for (int64_t i = 0; i < s * d; ++i)
        h[i] += a[i];
      n = layer_norm(h, s, p + "final_layer_norm");
      const Vec f = ffn(n, s, p, c_.encoder_ffn_dim);
      for (int64_t i = 0; i < s * d; ++i)
        h[i] += f[i];
    }
    return layer_norm(h, s, "model.encoder.layer_norm");
  }

  // Logits of the last token of `tokens` (positions 0..n-1); `encoder` null: no cross-attention
  // (transformers' decoder without encoder states).
  Vec last_logits(const std::vector<int32_t>& tokens, const Vec* encoder) {
    const int64_t d = c_.d_model;
    const auto n = static_cast<int64_t>(tokens.size());
    const Vec& emb = w("model.decoder.embed_tokens.weight");
    const Vec& pos = w("model.decoder.embed_positions.weight");
    const double scale = c_.scale_embedding ? std::sqrt(static_cast<double>(d)) : 1.0;
    Vec h(n * d);
    for (int64_t t = 0; t < n; ++t) {
      for (int64_t j = 0; j < d; ++j)
        h[t * d + j] = emb[tokens[t] * d + j] * scale + pos[t * d + j];
    }
    for (int32_t l = 0; l < c_.decoder_layers; ++l) {
      const std::string p = "model.decoder.layers." + std::to_string(l) + ".";
      Vec x = layer_norm(h, n, p + "self_attn_layer_norm");
      Vec a = attention(x, n, x, n, p + "self_attn.", c_.decoder_attention_heads, true);
      for (int64_t i = 0; i < n * d; ++i)
        h[i] += a[i];
      if (encoder != nullptr) {
        x = layer_norm(h, n, p + "encoder_attn_layer_norm");
        a = attention(x, n, *encoder, c_.max_source_positions, p + "encoder_attn.",
                      c_.decoder_attention_heads, false);
        for (int64_t i = 0; i < n * d; ++i)
          h[i] += a[i];
      }
      x = layer_norm(h, n, p + "final_layer_norm");
      const Vec f = ffn(x, n, p, c_.decoder_ffn_dim);
      for (int64_t i = 0; i < n * d; ++i)
        h[i] += f[i];
    }
    const Vec last(h.end() - d, h.end());
    const Vec normed = layer_norm(last, 1, "model.decoder.layer_norm");
    return linear(normed, 1, d, "model.decoder.embed_tokens.weight", "", c_.vocab_size);
  }

 private:
  const Vec& w(const std::string& name) {
    auto it = cache_.find(name);
    if (it != cache_.end()) return it->second;
    const auto view = store_.get(name);
    EXPECT_TRUE(view.is_ok()) << name;
    Vec v(view->numel());
    std::vector<float> f(v.size());
    convert_elements(view->data, view->dtype, f.data(), DType::kF32, f.size());
    std::copy(f.begin(), f.end(), v.begin());
    return cache_.emplace(name, std::move(v)).first->second;
  }

  static double gelu(double x) { return 0.5 * x * (1.0 + std::erf(x / std::sqrt(2.0))); }

  // out[t, o] = b[o] + sum_{c, j} w[o, c, j] * x(t - 1 + j, c), kernel 3, padding 1, stride 1.
  Vec conv(const float* x, int64_t in_ch, int64_t len, bool channel_major, const std::string& name,
           int stride) {
    Vec xd(in_ch * len);
    for (int64_t c = 0; c < in_ch; ++c) {
      for (int64_t t = 0; t < len; ++t)
        xd[c * len + t] = channel_major ? x[c * len + t] : x[t * in_ch + c];
    }
    return conv_channel_major(xd, in_ch, len, name, stride);
  }
  Vec conv_token_major(const Vec& x, int64_t len, const std::string& name, int stride) {
    const int64_t in_ch = c_.d_model;
    Vec xd(in_ch * len);
    for (int64_t t = 0; t < len; ++t) {
      for (int64_t c = 0; c < in_ch; ++c)
        xd[c * len + t] = x[t * in_ch + c];
    }
    return conv_channel_major(xd, in_ch, len, name, stride);
  }
  Vec conv_channel_major(const Vec& x, int64_t in_ch, int64_t len, const std::string& name,
                         int stride) {
    const Vec& wt = w("model.encoder." + name + ".weight");
    const Vec& b = w("model.encoder." + name + ".bias");
    const int64_t out_ch = c_.d_model;
    const int64_t out_len = (len + 2 - 3) / stride + 1;
    Vec out(out_len * out_ch);
    for (int64_t t = 0; t < out_len; ++t) {
      for (int64_t o = 0; o < out_ch; ++o) {
        double acc = b[o];
        for (int64_t c = 0; c < in_ch; ++c) {
          for (int64_t j = 0; j < 3; ++j) {
            const int64_t src = t * stride + j - 1;
            if (src >= 0 && src < len) acc += wt[(o * in_ch + c) * 3 + j] * x[c * len + src];
          }
        }
        out[t * out_ch + o] = acc;
      }
    }
    return out;
  }

  Vec linear(const Vec& x, int64_t rows, int64_t in, const std::string& weight,
             const std::string& bias, int64_t out) {
    const Vec& wt = w(weight);
    const Vec* b = bias.empty() ? nullptr : &w(bias);
    Vec y(rows * out);
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t o = 0; o < out; ++o) {
        double acc = b != nullptr ? (*b)[o] : 0.0;
        for (int64_t i = 0; i < in; ++i)
          acc += x[r * in + i] * wt[o * in + i];
        y[r * out + o] = acc;
      }
    }
    return y;
  }

  Vec layer_norm(const Vec& x, int64_t rows, const std::string& p) {
    const int64_t d = c_.d_model;
    const Vec& g = w(p + ".weight");
    const Vec& b = w(p + ".bias");
    Vec y(rows * d);
    for (int64_t r = 0; r < rows; ++r) {
      double mean = 0;
      for (int64_t j = 0; j < d; ++j)
        mean += x[r * d + j];
      mean /= static_cast<double>(d);
      double var = 0;
      for (int64_t j = 0; j < d; ++j)
        var += (x[r * d + j] - mean) * (x[r * d + j] - mean);
      var /= static_cast<double>(d);
      const double inv = 1.0 / std::sqrt(var + c_.layer_norm_eps);
      for (int64_t j = 0; j < d; ++j)
        y[r * d + j] = (x[r * d + j] - mean) * inv * g[j] + b[j];
    }
    return y;
  }

  // WhisperAttention: q = q_proj(x) * head_dim^-0.5, k = k_proj(kv) (no bias), v = v_proj(kv);
  // softmax(q k^T) v per head (causal: query i sees keys 0..i), then out_proj.
  Vec attention(const Vec& x, int64_t nq, const Vec& kv, int64_t nk, const std::string& p,
                int32_t heads, bool causal) {
    const int64_t d = c_.d_model;
    const int64_t hd = d / heads;
    Vec q = linear(x, nq, d, p + "q_proj.weight", p + "q_proj.bias", d);
    const double scaling = 1.0 / std::sqrt(static_cast<double>(hd));
    for (double& v : q)
      v *= scaling;
    const Vec k = linear(kv, nk, d, p + "k_proj.weight", "", d);
    const Vec v = linear(kv, nk, d, p + "v_proj.weight", p + "v_proj.bias", d);
    Vec o(nq * d, 0.0);
    Vec s(nk);
    for (int64_t h = 0; h < heads; ++h) {
      for (int64_t i = 0; i < nq; ++i) {
        const int64_t visible = causal ? i + 1 : nk;
        double mx = -INFINITY;
        for (int64_t j = 0; j < visible; ++j) {
          double dot = 0;
          for (int64_t e = 0; e < hd; ++e)
            dot += q[i * d + h * hd + e] * k[j * d + h * hd + e];
          s[j] = dot;
          mx = std::max(mx, dot);
        }
        double sum = 0;
        for (int64_t j = 0; j < visible; ++j) {
          s[j] = std::exp(s[j] - mx);
          sum += s[j];
        }
        for (int64_t j = 0; j < visible; ++j) {
          for (int64_t e = 0; e < hd; ++e)
            o[i * d + h * hd + e] += s[j] / sum * v[j * d + h * hd + e];
        }
      }
    }
    return linear(o, nq, d, p + "out_proj.weight", p + "out_proj.bias", d);
  }

  Vec ffn(const Vec& x, int64_t rows, const std::string& p, int64_t inner) {
    Vec f = linear(x, rows, c_.d_model, p + "fc1.weight", p + "fc1.bias", inner);
    for (double& v : f)
      v = gelu(v);
    return linear(f, rows, inner, p + "fc2.weight", p + "fc2.bias", c_.d_model);
  }

  const checkpoint::WhisperConfig& c_;
  const checkpoint::WeightStore& store_;
  std::map<std::string, Vec> cache_;
};

// max |got - want| / max(1, max |want|)
template <typename A, typename B>
double max_rel_diff(const A& got, const B& want) {
  EXPECT_EQ(got.size(), want.size());
  double scale = 1.0;
  double diff = 0.0;
  for (size_t i = 0; i < want.size() && i < got.size(); ++i) {
    scale = std::max(scale, std::abs(static_cast<double>(want[i])));
    const double e = std::abs(static_cast<double>(got[i]) - static_cast<double>(want[i]));
    if (std::isnan(e)) return INFINITY;
    diff = std::max(diff, e);
  }
  return diff / scale;
}

}  // namespace kvserve::model::testing
