// CPU kernel of varlen attention (f32): per (sequence, query block, head), the scores of the block
// against the keys it can see with one sgemm, a row softmax (float64 sums), then the output with
// a second sgemm; work items in parallel with OpenMP.
#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "kvserve/platform/cpu/cpu_ops.h"
#include "kvserve/platform/ops/varlen_attention.h"

namespace kvserve::ops::cpu {
namespace {

constexpr int64_t kQueryBlock = 128;  // query rows per score block

struct Block {
  int64_t q_begin, q_len, kv_begin, kv_len;  // the sequence
  int64_t q0;                                // the block's first query within it
};

// Keys visible to query i of a sequence with q_len queries and kv_len keys.
int64_t visible(bool causal, int64_t i, int64_t q_len, int64_t kv_len) {
  return causal ? std::clamp<int64_t>(kv_len - q_len + i + 1, 0, kv_len) : kv_len;
}

}  // namespace

void varlen_attention(const VarlenAttentionParams& p) {
  require_f32(p.dtype, "varlen_attention");
  KV_CHECK(p.num_heads > 0 && p.num_kv_heads > 0 && p.num_heads % p.num_kv_heads == 0,
           "varlen_attention: {} query heads over {} KV heads", p.num_heads, p.num_kv_heads);
  KV_CHECK((p.cu_q == nullptr) == (p.cu_kv == nullptr),
           "varlen_attention: give both cu_q and cu_kv or neither");
  KV_CHECK(p.window_left < 0 && p.logit_softcap == 0.0f,
           "varlen_attention on the CPU: no sliding window ({}) or soft-capping ({}); the CUDA "
           "kernel has them",
           p.window_left, p.logit_softcap);
  std::vector<Block> blocks;
  int64_t max_kv = 0;
  for (int32_t s = 0; s < (p.cu_q != nullptr ? p.num_seqs : 1); ++s) {
    Block b{0, p.num_q, 0, p.num_kv, 0};
    if (p.cu_q != nullptr) {
      b.q_begin = p.cu_q[s];
      b.q_len = p.cu_q[s + 1] - b.q_begin;
      b.kv_begin = p.cu_kv[s];
      b.kv_len = p.cu_kv[s + 1] - b.kv_begin;
    }
    max_kv = std::max(max_kv, b.kv_len);
    for (b.q0 = 0; b.q0 < b.q_len; b.q0 += kQueryBlock)
      blocks.push_back(b);
  }
  const int32_t group = p.num_heads / p.num_kv_heads;
  const auto work = static_cast<int64_t>(blocks.size()) * p.num_heads;
  const auto* q = static_cast<const float*>(p.q);
  const auto* k = static_cast<const float*>(p.k);
  const auto* v = static_cast<const float*>(p.v);
  auto* out = static_cast<float*>(p.out);
#pragma omp parallel
  {
    std::vector<float> scores(static_cast<size_t>(kQueryBlock * max_kv));
#pragma omp for schedule(dynamic, 1)
    for (int64_t w = 0; w < work; ++w) {
      const Block& b = blocks[w / p.num_heads];
      const int64_t h = w % p.num_heads;
      const int64_t rows = std::min(kQueryBlock, b.q_len - b.q0);
      const int64_t q_off = (b.q_begin + b.q0) * p.q_stride + h * p.head_dim;
      const int64_t kv_col = (h / group) * p.head_dim;
      float* o = out + (b.q_begin + b.q0) * p.out_stride + h * p.head_dim;
      // Keys seen by the block's last (latest) query: the others see a prefix of them.
      const int64_t cols = visible(p.causal, b.q0 + rows - 1, b.q_len, b.kv_len);
      if (cols == 0) {
        for (int64_t r = 0; r < rows; ++r)
          std::fill_n(o + r * p.out_stride, p.head_dim, 0.0f);
        continue;
      }
      const float* kh = k + b.kv_begin * p.k_stride + kv_col;
      const float* vh = v + b.kv_begin * p.v_stride + kv_col;
      // scores[rows, cols] = scaling * q_h . k_h^T
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<blasint>(rows),
                  static_cast<blasint>(cols), p.head_dim, p.scaling, q + q_off,
                  static_cast<blasint>(p.q_stride), kh, static_cast<blasint>(p.k_stride), 0.0f,
                  scores.data(), static_cast<blasint>(cols));
      for (int64_t r = 0; r < rows; ++r) {
        float* s = scores.data() + r * cols;
        const int64_t seen = visible(p.causal, b.q0 + r, b.q_len, b.kv_len);
        if (seen == 0) {
          std::fill_n(s, cols, 0.0f);  // a zero output
          continue;
        }
        const float mx = *std::max_element(s, s + seen);
        double sum = 0;
        for (int64_t j = 0; j < seen; ++j) {
          s[j] = std::exp(s[j] - mx);
          sum += s[j];
        }
        const auto inv = static_cast<float>(1.0 / sum);
        for (int64_t j = 0; j < seen; ++j)
          s[j] *= inv;
        std::fill(s + seen, s + cols, 0.0f);
      }
      // out_h[rows, head_dim] = probs[rows, cols] . v_h[cols, head_dim]
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, static_cast<blasint>(rows), p.head_dim,
                  static_cast<blasint>(cols), 1.0f, scores.data(), static_cast<blasint>(cols), vh,
                  static_cast<blasint>(p.v_stride), 0.0f, o, static_cast<blasint>(p.out_stride));
    }
  }
}

}  // namespace kvserve::ops::cpu
