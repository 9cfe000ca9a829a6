// Reads K/V rows of the pool as f32 on the CPU, whatever the cache dtype (fp8 rows are scaled
// back by the layer's scale). An f32 pool is read in place; other dtypes are converted into a
// per-reader buffer. One reader per thread.
#pragma once

#include <vector>

#include "kvserve/mem/kv_pool.h"

namespace kvserve::attention {

class KvReader {
 public:
  KvReader(const mem::MHATokenToKVPool& pool, int32_t layer)
      : k_(pool.k_buffer(layer)),
        v_(pool.v_buffer(layer)),
        row_elems_(k_.dim(1) * k_.dim(2)),
        head_dim_(k_.dim(2)),
        k_scale_(pool.k_scale(layer)),
        v_scale_(pool.v_scale(layer)),
        in_place_(k_.dtype() == DType::kF32) {
    if (!in_place_) scratch_.resize(static_cast<size_t>(head_dim_));
  }

  // Head `kv_head` of the K (or V) row at `slot`: head_dim floats, valid until the next call.
  const float* k(int64_t slot, int32_t kv_head) { return read(k_, k_scale_, slot, kv_head); }
  const float* v(int64_t slot, int32_t kv_head) { return read(v_, v_scale_, slot, kv_head); }

 private:
  const float* read(const TensorView& buf, float scale, int64_t slot, int32_t kv_head) {
    const int64_t offset = slot * row_elems_ + static_cast<int64_t>(kv_head) * head_dim_;
    if (in_place_) return buf.data_as<const float>() + offset;
    const auto* base = static_cast<const uint8_t*>(buf.data()) + offset * dtype_size(buf.dtype());
    convert_elements(base, buf.dtype(), scratch_.data(), DType::kF32, head_dim_, scale);
    return scratch_.data();
  }

  TensorView k_;
  TensorView v_;
  int64_t row_elems_;
  int64_t head_dim_;
  float k_scale_;
  float v_scale_;
  bool in_place_;
  std::vector<float> scratch_;
};

}  // namespace kvserve::attention
