// The native backend: per request, gather the row's K/V into contiguous buffers, then dense
// attention with float64 accumulation. Slow by design (seed 001's torch-native path); it is the
// reference every other backend is compared with. Sliding windows and soft-capping as
// AttentionLayer defines them (self-attention only).
#include <algorithm>
#include <cmath>
#include <cstring>

#include "kvserve/attention/cpu_backends.h"
#include "kvserve/attention/kv_reader.h"

namespace kvserve::attention {
namespace {

class NativeBackend final : public AttentionBackend {
 public:
  std::string_view name() const override { return "native"; }
  Status init_forward_metadata(const mem::ForwardBatch& /*batch*/) override { return Status::ok(); }
  Status forward_extend(const AttentionIO& io, const AttentionLayer& layer,
                        const mem::ForwardBatch& batch) override {
    run(io, layer, batch);
    return Status::ok();
  }
  Status forward_decode(const AttentionIO& io, const AttentionLayer& layer,
                        const mem::ForwardBatch& batch) override {
    run(io, layer, batch);
    return Status::ok();
  }

 private:
  static void run(const AttentionIO& io, const AttentionLayer& layer,
                  const mem::ForwardBatch& batch) {
    KV_CHECK(io.dtype == DType::kF32, "the CPU backends compute in f32");
    save_kv_to_pool(io, layer, batch);
    const int32_t heads = layer.num_heads;
    const int32_t kv_heads = layer.num_kv_heads;
    const int32_t dim = layer.head_dim;
    const int32_t group = heads / kv_heads;
    const auto* q = static_cast<const float*>(io.q);
    auto* out = static_cast<float*>(io.out);
    KvReader reader(*batch.kv_pool, layer.layer_id);
    std::vector<float> keys;
    std::vector<float> values;
    std::vector<double> scores;
    for (int32_t b = 0; b < batch.batch_size(); ++b) {
      const int32_t kv_begin = layer.is_cross_attention ? 0 : batch.kv_start(b);
      const int32_t kv_len = layer.is_cross_attention ? batch.encoder_len(b) : batch.seq_lens[b];
      const int32_t first = batch.extend_start_loc[b];
      const int32_t count = batch.extend_lens[b];
      if (kv_len == 0) {  // empty KV: zeros, nothing read
        std::memset(out + static_cast<int64_t>(first) * heads * dim, 0,
                    sizeof(float) * count * heads * dim);
        continue;
      }
      // Gather the request's K/V: [kv_len, kv_heads, dim].
      const auto slots = batch.req_to_token->row(batch.req_pool_indices[b], kv_begin, kv_len);
      keys.resize(static_cast<size_t>(kv_len) * kv_heads * dim);
      values.resize(keys.size());
      for (int32_t j = 0; j < kv_len; ++j) {
        for (int32_t g = 0; g < kv_heads; ++g) {
          const size_t o = (static_cast<size_t>(j) * kv_heads + g) * dim;
          std::memcpy(&keys[o], reader.k(slots[j], g), sizeof(float) * dim);
          std::memcpy(&values[o], reader.v(slots[j], g), sizeof(float) * dim);
        }
      }
      for (int32_t i = 0; i < count; ++i) {
        const int32_t t = first + i;
        const int32_t pos = batch.prefix_lens[b] + i;
        const int32_t visible = layer.is_cross_attention ? kv_len : pos + 1;
        KV_CHECK_LE(visible, kv_len, "token at position {} of request {}", pos, b);
        // The sliding window: positions [pos - window_left, pos].
        const int32_t lo = !layer.is_cross_attention && layer.window_left >= 0
                               ? std::max(0, pos - layer.window_left)
                               : 0;
        scores.resize(visible);
        for (int32_t h = 0; h < heads; ++h) {
          const int32_t g = h / group;
          const float* qh = q + (static_cast<int64_t>(t) * heads + h) * dim;
          double max_score = -INFINITY;
          for (int32_t j = lo; j < visible; ++j) {
            const float* kj = &keys[(static_cast<size_t>(j) * kv_heads + g) * dim];
            double dot = 0;
            for (int32_t d = 0; d < dim; ++d)
              dot += static_cast<double>(qh[d]) * kj[d];
            scores[j] = dot * layer.scaling;
            if (layer.logit_softcap > 0) {
              scores[j] = layer.logit_softcap * std::tanh(scores[j] / layer.logit_softcap);
            }
            max_score = std::max(max_score, scores[j]);
          }
          double sum = 0;
          for (int32_t j = lo; j < visible; ++j)
            sum += scores[j] = std::exp(scores[j] - max_score);
          float* oh = out + (static_cast<int64_t>(t) * heads + h) * dim;
          for (int32_t d = 0; d < dim; ++d) {
            double acc = 0;
            for (int32_t j = lo; j < visible; ++j) {
              acc += scores[j] * values[(static_cast<size_t>(j) * kv_heads + g) * dim + d];
            }
            oh[d] = static_cast<float>(acc / sum);
          }
        }
      }
    }
  }
};

}  // namespace

std::unique_ptr<AttentionBackend> make_native_backend(platform::Platform& /*platform*/) {
  return std::make_unique<NativeBackend>();
}

}  // namespace kvserve::attention
