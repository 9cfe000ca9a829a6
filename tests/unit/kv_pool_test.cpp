// MHATokenToKVPool on the CPU platform: layout, set_kv_buffer conversions, fp8 scales.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "kvserve/mem/kv_pool.h"

namespace kvserve::mem {
namespace {

std::unique_ptr<platform::Platform> cpu() {
  return std::move(platform::create_platform(Device{}).value());
}

KvPoolConfig small_config(DType dtype) {
  return KvPoolConfig{.num_layers = 3,
                      .num_kv_heads = 2,
                      .head_dim = 8,
                      .size = 64,
                      .page_size = 4,
                      .dtype = dtype};
}

// Relative rounding error of each storage format (half an ulp) and its smallest normal value.
double rel_error(DType t) {
  switch (t) {
    case DType::kF32:
      return 0;
    case DType::kF16:
      return std::ldexp(1.0, -11);
    case DType::kBF16:
      return std::ldexp(1.0, -8);
    case DType::kFP8E4M3:
      return std::ldexp(1.0, -4);
    case DType::kFP8E5M2:
      return std::ldexp(1.0, -3);
    default:
      return 1;
  }
}

TEST(KvPool, LayoutAndBufferInfos) {
  auto p = cpu();
  const KvPoolConfig cfg = small_config(DType::kBF16);
  auto pool = MHATokenToKVPool::create(*p, cfg);
  ASSERT_TRUE(pool.is_ok());
  const auto& kv = **pool;
  EXPECT_EQ(kv.num_slots(), 64 + 4);
  EXPECT_EQ(kv.slot_bytes(), 2u * 8 * 2);
  EXPECT_EQ(cfg.bytes_per_token(), 2u * 3 * 2 * 8 * 2);
  const TensorView k0 = kv.k_buffer(0);
  EXPECT_EQ(k0.dim(0), 68);
  EXPECT_EQ(k0.dim(1), 2);
  EXPECT_EQ(k0.dim(2), 8);
  const auto infos = kv.get_contiguous_buf_infos();
  ASSERT_EQ(infos.size(), 6u);  // K of 3 layers, then V of 3 layers
  for (size_t i = 0; i < infos.size(); ++i) {
    EXPECT_EQ(infos[i].bytes, kv.slot_bytes() * 68);
    EXPECT_EQ(infos[i].page_bytes, kv.slot_bytes() * 4);
    if (i > 0) {
      EXPECT_EQ(static_cast<uint8_t*>(infos[i].ptr),
                static_cast<uint8_t*>(infos[i - 1].ptr) + infos[i - 1].bytes);
    }
  }
  EXPECT_EQ(infos[0].ptr, kv.k_buffer(0).data());
  EXPECT_EQ(infos[3].ptr, kv.v_buffer(0).data());
  EXPECT_EQ(infos[5].ptr, kv.v_buffer(2).data());
  // Zero-initialised.
  const auto* bytes = static_cast<const uint8_t*>(infos[0].ptr);
  for (size_t i = 0; i < infos[0].bytes; ++i)
    ASSERT_EQ(bytes[i], 0);
}

TEST(KvPool, SetKvBufferConvertsAndTouchesOnlyItsSlots) {
  auto p = cpu();
  const uint64_t seed = 2024;
  SCOPED_TRACE(testing::Message() << "seed " << seed);
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  for (const DType dtype :
       {DType::kF32, DType::kF16, DType::kBF16, DType::kFP8E4M3, DType::kFP8E5M2}) {
    SCOPED_TRACE(dtype_name(dtype));
    auto pool = std::move(MHATokenToKVPool::create(*p, small_config(dtype)).value());
    const float k_scale = is_float8(dtype) ? 0.25f : 1.0f;
    const float v_scale = is_float8(dtype) ? 2.0f : 1.0f;
    pool->set_kv_scales(1, k_scale, v_scale);
    std::vector<int32_t> loc = {9, 4, 63, 17};
    const int64_t row = 2 * 8;
    std::vector<float> k(loc.size() * row);
    std::vector<float> v(loc.size() * row);
    for (auto& x : k)
      x = normal(rng);
    for (auto& x : v)
      x = normal(rng);
    pool->set_kv_buffer(1, TensorView(loc.data(), DType::kI32, {4}),
                        TensorView(k.data(), DType::kF32, {4, 2, 8}),
                        TensorView(v.data(), DType::kF32, {4, 2, 8}));
    // Read back every slot of layer 1 (dequantised with the scale) and the other layers.
    for (int32_t layer = 0; layer < 3; ++layer) {
      for (const bool is_v : {false, true}) {
        const TensorView buf = is_v ? pool->v_buffer(layer) : pool->k_buffer(layer);
        std::vector<float> all(buf.numel());
        convert_elements(buf.data(), dtype, all.data(), DType::kF32, all.size(),
                         is_v ? v_scale : k_scale);
        for (int64_t slot = 0; slot < buf.dim(0); ++slot) {
          const auto it = std::find(loc.begin(), loc.end(), slot);
          for (int64_t j = 0; j < row; ++j) {
            const float got = all[slot * row + j];
            if (layer != 1 || it == loc.end()) {
              ASSERT_EQ(got, 0.0f) << "layer " << layer << " slot " << slot;
              continue;
            }
            const float want = (is_v ? v : k)[(it - loc.begin()) * row + j];
            const double tol = std::fabs(want) * rel_error(dtype) + 1e-3;
            ASSERT_NEAR(got, want, tol) << "slot " << slot << " element " << j;
          }
        }
      }
    }
  }
}

TEST(KvPool, BadInputs) {
  auto p = cpu();
  KvPoolConfig cfg = small_config(DType::kBF16);
  cfg.head_dim = 0;
  EXPECT_EQ(MHATokenToKVPool::create(*p, cfg).status().code(), StatusCode::kInvalidArgument);
  cfg = small_config(DType::kI32);
  EXPECT_EQ(MHATokenToKVPool::create(*p, cfg).status().code(), StatusCode::kInvalidArgument);
  cfg = small_config(DType::kBF16);
  cfg.size = int64_t{1} << 42;  // petabytes
  EXPECT_EQ(MHATokenToKVPool::create(*p, cfg).status().code(), StatusCode::kOutOfMemory);

  auto pool = std::move(MHATokenToKVPool::create(*p, small_config(DType::kBF16)).value());
  std::vector<int32_t> loc = {1, 2};
  std::vector<float> kv(2 * 16);
  const TensorView l(loc.data(), DType::kI32, {2});
  const TensorView t(kv.data(), DType::kF32, {2, 2, 8});
  EXPECT_THROW(pool->set_kv_buffer(3, l, t, t), CheckError);  // no such layer
  EXPECT_THROW(pool->set_kv_buffer(0, l, TensorView(kv.data(), DType::kF32, {2, 8}), t),
               CheckError);  // wrong size
  std::vector<int32_t> bad = {1, 68};
  EXPECT_THROW(pool->set_kv_buffer(0, TensorView(bad.data(), DType::kI32, {2}), t, t), CheckError);
  const TensorView on_gpu(loc.data(), DType::kI32, {2}, Device{DeviceKind::kCuda, 0});
  EXPECT_THROW(pool->set_kv_buffer(0, on_gpu, t, t), CheckError);
  EXPECT_THROW(pool->set_kv_scales(0, 0.0f, 1.0f), CheckError);
}

}  // namespace
}  // namespace kvserve::mem
