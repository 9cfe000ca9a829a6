// The "cpu" backend: one batched pass over the paged pool, in place. Per forward it builds CSR
// indices of every request's KV range (page ids when every range starts on a page boundary, else
// token slots, e.g. a ragged encoder-decoder row); per layer each (token, kv head) pair streams
// its visible K/V once with an online softmax shared by the kv head's group of query heads.
// Sliding windows start the stream at the window's first position (whole pages before it are
// never read); soft-capping caps each score before the softmax.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "kvserve/attention/cpu_backends.h"
#include "kvserve/attention/kv_reader.h"
#include "kvserve/mem/page_table.h"

namespace kvserve::attention {
namespace {

class CpuPagedBackend final : public AttentionBackend {
 public:
  std::string_view name() const override { return "cpu"; }

  Status init_forward_metadata(const mem::ForwardBatch& batch) override {
    const int32_t ps = batch.kv_pool->config().page_size;
    const int32_t bs = batch.batch_size();
    std::vector<mem::KvRange> self(bs);
    std::vector<mem::KvRange> cross(bs);
    bool aligned = true;
    for (int32_t b = 0; b < bs; ++b) {
      self[b] = {batch.req_pool_indices[b], batch.kv_start(b), batch.seq_lens[b]};
      cross[b] = {batch.req_pool_indices[b], 0, batch.encoder_len(b)};
      aligned &= batch.kv_start(b) % ps == 0;
    }
    mem::build_kv_indices(*batch.req_to_token, self,
                          aligned ? mem::IndexUnit::kPage : mem::IndexUnit::kToken, ps, self_);
    mem::build_kv_indices(*batch.req_to_token, cross, mem::IndexUnit::kPage, ps, cross_);
    token_request_.resize(batch.num_tokens());
    for (int32_t b = 0; b < bs; ++b) {
      for (int32_t i = 0; i < batch.extend_lens[b]; ++i) {
        token_request_[batch.extend_start_loc[b] + i] = b;
      }
    }
    return Status::ok();  // host memory only
  }

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
  void run(const AttentionIO& io, const AttentionLayer& layer, const mem::ForwardBatch& batch) {
    KV_CHECK(io.dtype == DType::kF32, "the CPU backends compute in f32");
    KV_CHECK_EQ(static_cast<int32_t>(token_request_.size()), batch.num_tokens(),
                "init_forward_metadata was not called for this batch");
    save_kv_to_pool(io, layer, batch);
    const mem::KvIndices& idx = layer.is_cross_attention ? cross_ : self_;
    const int32_t heads = layer.num_heads;
    const int32_t kv_heads = layer.num_kv_heads;
    const int32_t dim = layer.head_dim;
    const int32_t group = heads / kv_heads;
    KV_CHECK_LE(group, 64, "GQA group of {}", group);
    const auto* q = static_cast<const float*>(io.q);
    auto* out = static_cast<float*>(io.out);
    const int64_t work = static_cast<int64_t>(batch.num_tokens()) * kv_heads;
    const int32_t ups = idx.page_size;  // 1 for token indices
    const float cap = layer.logit_softcap;

#pragma omp parallel
    {
      KvReader reader(*batch.kv_pool, layer.layer_id);
      std::vector<float> acc_buf(static_cast<size_t>(group) * dim);
      float* acc = acc_buf.data();
      float m[64];
      float l[64];
#pragma omp for schedule(dynamic, 4)
      for (int64_t w = 0; w < work; ++w) {
        const auto t = static_cast<int32_t>(w / kv_heads);
        const auto g = static_cast<int32_t>(w % kv_heads);
        const int32_t b = token_request_[t];
        const int32_t kv_len = idx.kv_lens[b];
        const int32_t pos = batch.prefix_lens[b] + (t - batch.extend_start_loc[b]);
        const int32_t visible = layer.is_cross_attention ? kv_len : std::min(pos + 1, kv_len);
        // The sliding window: positions [pos - window_left, pos].
        const int32_t lo = !layer.is_cross_attention && layer.window_left >= 0
                               ? std::max(0, pos - layer.window_left)
                               : 0;
        float* o = out + (static_cast<int64_t>(t) * heads + g * group) * dim;
        if (visible <= lo) {  // empty KV: zeros, nothing read
          std::memset(o, 0, sizeof(float) * group * dim);
          continue;
        }
        const float* qg = q + (static_cast<int64_t>(t) * heads + g * group) * dim;
        for (int32_t h = 0; h < group; ++h) {
          m[h] = -INFINITY;
          l[h] = 0;
          std::memset(acc + h * dim, 0, sizeof(float) * dim);
        }
        const int32_t* pages = idx.indices.data() + idx.indptr[b];
        for (int32_t j = lo; j < visible; ++j) {
          const int64_t slot = static_cast<int64_t>(pages[j / ups]) * ups + j % ups;
          const float* kj = reader.k(slot, g);
          float s[64];
          for (int32_t h = 0; h < group; ++h) {
            const float* qh = qg + h * dim;
            float dot = 0;
            for (int32_t d = 0; d < dim; ++d)
              dot += qh[d] * kj[d];
            s[h] = dot * layer.scaling;
            if (cap > 0) s[h] = cap * std::tanh(s[h] / cap);
          }
          const float* vj = reader.v(slot, g);
          for (int32_t h = 0; h < group; ++h) {
            const float m_new = std::max(m[h], s[h]);
            const float correction = std::exp(m[h] - m_new);
            const float p = std::exp(s[h] - m_new);
            l[h] = l[h] * correction + p;
            m[h] = m_new;
            float* a = acc + h * dim;
            for (int32_t d = 0; d < dim; ++d)
              a[d] = a[d] * correction + p * vj[d];
          }
        }
        for (int32_t h = 0; h < group; ++h) {
          const float inv = 1.0f / l[h];
          for (int32_t d = 0; d < dim; ++d)
            o[h * dim + d] = acc[h * dim + d] * inv;
        }
      }
    }
  }

  mem::KvIndices self_;
  mem::KvIndices cross_;
  std::vector<int32_t> token_request_;
};

}  // namespace

std::unique_ptr<AttentionBackend> make_cpu_paged_backend(platform::Platform& /*platform*/) {
  return std::make_unique<CpuPagedBackend>();
}

}  // namespace kvserve::attention
