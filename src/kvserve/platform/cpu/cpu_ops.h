// What the CPU kernels (cpu/*.cpp) share: they compute in f32 only.
#pragma once

#include "kvserve/core/check.h"
#include "kvserve/core/dtype.h"

namespace kvserve::ops::cpu {

inline void require_f32(DType t, const char* op) {
  KV_CHECK(t == DType::kF32, "{}: the CPU platform computes in f32, got {}", op, dtype_name(t));
}

}  // namespace kvserve::ops::cpu
