// dtypes: every conversion against a float64 reference written from the format definitions.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "kvserve/core/dtype.h"
#include "kvserve/core/status.h"

namespace kvserve {
namespace {

// --- float64 references, straight from the format definitions ----------------------------------

// A binary float format with `exp_bits` exponent bits, `man_bits` mantissa bits, bias
// 2^(exp_bits-1)-1. `ieee_top`: the all-ones exponent is inf/NaN (f16, e5m2); e4m3fn instead has
// no inf and only mantissa all-ones as NaN.
struct Format {
  int exp_bits;
  int man_bits;
  bool ieee_top;
  int bias() const { return (1 << (exp_bits - 1)) - 1; }
  int bits() const { return 1 + exp_bits + man_bits; }

  double decode(uint32_t code) const {
    const bool neg = (code >> (exp_bits + man_bits)) & 1;
    const int e = (code >> man_bits) & ((1 << exp_bits) - 1);
    const int m = code & ((1 << man_bits) - 1);
    const int top = (1 << exp_bits) - 1;
    double v;
    if (ieee_top && e == top) {
      v = m == 0 ? std::numeric_limits<double>::infinity() : std::nan("");
    } else if (!ieee_top && e == top && m == (1 << man_bits) - 1) {
      v = std::nan("");
    } else if (e == 0) {
      v = std::ldexp(static_cast<double>(m), 1 - bias() - man_bits);
    } else {
      v = std::ldexp(1.0 + std::ldexp(static_cast<double>(m), -man_bits), e - bias());
    }
    return neg ? -v : v;
  }

  // Nearest finite code to x (ties to an even mantissa), saturating beyond the largest finite
  // value, when `saturate`; otherwise overflow goes to infinity by IEEE rounding.
  uint32_t encode(double x, bool saturate) const {
    const uint32_t sign = std::signbit(x) ? 1u << (exp_bits + man_bits) : 0;
    const double a = std::fabs(x);
    uint32_t best = 0;
    double best_err = std::numeric_limits<double>::infinity();
    double max_finite = 0;
    uint32_t max_code = 0;
    for (uint32_t c = 0; c < (1u << (exp_bits + man_bits)); ++c) {
      const double v = decode(c);
      if (!std::isfinite(v)) continue;
      if (v > max_finite) {
        max_finite = v;
        max_code = c;
      }
      const double err = std::fabs(v - a);
      if (err < best_err || (err == best_err && (c & 1) == 0)) {
        best_err = err;
        best = c;
      }
    }
    if (a > max_finite) {
      if (saturate) return sign | max_code;
      // IEEE: round to nearest; beyond max + half an ulp goes to infinity (ties to even: inf).
      const double ulp = std::ldexp(1.0, (int)std::ilogb(max_finite) - man_bits);
      if (a >= max_finite + ulp / 2) return sign | ((uint32_t)((1 << exp_bits) - 1) << man_bits);
      return sign | max_code;
    }
    return sign | best;
  }
};

const Format kE4M3{4, 3, false};
const Format kE5M2{5, 2, true};
const Format kF16{5, 10, true};

std::vector<float> interesting_floats(uint64_t seed) {
  std::vector<float> xs = {0.0f,
                           -0.0f,
                           1.0f,
                           -1.0f,
                           448.0f,
                           449.0f,
                           464.0f,
                           480.0f,
                           1e6f,
                           -1e6f,
                           57344.0f,
                           61440.0f,
                           65504.0f,
                           65519.0f,
                           65520.0f,
                           65536.0f,
                           1e-8f,
                           -1e-8f,
                           0.5f,
                           3.14159f,
                           std::numeric_limits<float>::infinity(),
                           -std::numeric_limits<float>::infinity(),
                           std::numeric_limits<float>::denorm_min()};
  // Every f16 value and the midpoints between neighbours (exact ties for f16, many for fp8).
  for (uint32_t h = 0; h < 0x7c00; ++h) {
    const double v = kF16.decode(h);
    xs.push_back(static_cast<float>(v));
    xs.push_back(static_cast<float>(-v));
    xs.push_back(static_cast<float>((v + kF16.decode(h + 1)) / 2));
  }
  std::mt19937 rng(static_cast<uint32_t>(seed));
  std::uniform_real_distribution<float> exponent(-30.0f, 20.0f);
  std::uniform_real_distribution<float> mantissa(1.0f, 2.0f);
  for (int i = 0; i < 20000; ++i) {
    const float x = std::ldexp(mantissa(rng), static_cast<int>(exponent(rng)));
    xs.push_back(i % 2 ? x : -x);
  }
  return xs;
}

bool same_value(double a, double b) {
  if (std::isnan(a) || std::isnan(b)) return std::isnan(a) && std::isnan(b);
  return a == b && std::signbit(a) == std::signbit(b);
}

TEST(DType, SizesAndNames) {
  EXPECT_EQ(dtype_size(DType::kF32), 4u);
  EXPECT_EQ(dtype_size(DType::kBF16), 2u);
  EXPECT_EQ(dtype_size(DType::kF16), 2u);
  EXPECT_EQ(dtype_size(DType::kFP8E4M3), 1u);
  EXPECT_EQ(dtype_size(DType::kFP8E5M2), 1u);
  EXPECT_EQ(dtype_size(DType::kI64), 8u);
  for (const DType t : {DType::kF32, DType::kF16, DType::kBF16, DType::kFP8E4M3, DType::kFP8E5M2,
                        DType::kI32, DType::kI64, DType::kU8}) {
    DType parsed;
    ASSERT_TRUE(parse_dtype(dtype_name(t), &parsed)) << dtype_name(t);
    EXPECT_EQ(parsed, t);
  }
  DType t;
  EXPECT_TRUE(parse_dtype("bfloat16", &t));
  EXPECT_EQ(t, DType::kBF16);
  EXPECT_TRUE(parse_dtype("float8_e4m3fn", &t));
  EXPECT_EQ(t, DType::kFP8E4M3);
  EXPECT_FALSE(parse_dtype("fp4", &t));
}

TEST(DType, Fp8DecodeEveryCode) {
  for (uint32_t c = 0; c < 256; ++c) {
    EXPECT_TRUE(same_value(fp8_e4m3_to_float(static_cast<uint8_t>(c)), kE4M3.decode(c))) << c;
    EXPECT_TRUE(same_value(fp8_e5m2_to_float(static_cast<uint8_t>(c)), kE5M2.decode(c))) << c;
  }
  EXPECT_EQ(fp8_e4m3_to_float(0x7e), 448.0f);
  EXPECT_EQ(fp8_e5m2_to_float(0x7b), 57344.0f);
}

TEST(DType, Fp8EncodeRoundsToNearestEvenAndSaturates) {
  const uint64_t seed = 1234;
  SCOPED_TRACE(testing::Message() << "seed " << seed);
  for (const float x : interesting_floats(seed)) {
    if (std::isnan(x)) continue;
    EXPECT_EQ(float_to_fp8_e4m3(x), kE4M3.encode(x, /*saturate=*/true)) << x;
    EXPECT_EQ(float_to_fp8_e5m2(x), kE5M2.encode(x, /*saturate=*/true)) << x;
  }
  EXPECT_TRUE(std::isnan(fp8_e4m3_to_float(float_to_fp8_e4m3(std::nanf("")))));
  EXPECT_TRUE(std::isnan(fp8_e5m2_to_float(float_to_fp8_e5m2(std::nanf("")))));
}

TEST(DType, F16DecodeEveryCode) {
  for (uint32_t h = 0; h < 65536; ++h) {
    ASSERT_TRUE(same_value(f16_to_float(static_cast<uint16_t>(h)), kF16.decode(h))) << h;
  }
}

TEST(DType, F16EncodeRoundsToNearestEven) {
  // The brute-force reference scans all 2^15 codes per value: check a deterministic sample.
  const uint64_t seed = 99;
  SCOPED_TRACE(testing::Message() << "seed " << seed);
  const std::vector<float> xs = interesting_floats(seed);
  for (size_t i = 0; i < xs.size(); i += 101) {
    ASSERT_EQ(float_to_f16(xs[i]), kF16.encode(xs[i], /*saturate=*/false)) << xs[i];
  }
  EXPECT_EQ(float_to_f16(65519.0f), 0x7bff);  // below the tie: the largest finite half
  EXPECT_EQ(float_to_f16(65520.0f), 0x7c00);  // the tie between 65504 and 65536 goes to inf
  EXPECT_TRUE(std::isnan(f16_to_float(float_to_f16(std::nanf("")))));
}

TEST(DType, Bf16RoundTripAndRounding) {
  std::mt19937 rng(7);
  for (int i = 0; i < 200000; ++i) {
    const uint32_t bits = rng();
    const float x = std::bit_cast<float>(bits);
    const uint16_t h = float_to_bf16(x);
    if (std::isnan(x)) {
      EXPECT_TRUE(std::isnan(bf16_to_float(h)));
      continue;
    }
    // The two bf16 neighbours of x (as doubles) and the nearest, ties to even.
    const uint32_t lo_bits = bits & 0xffff0000u;
    const double lo = std::bit_cast<float>(lo_bits);
    // Past the largest finite bf16 the next step is 2^128 (IEEE rounds there to infinity).
    const float hi_f = std::bit_cast<float>(lo_bits + 0x10000u);
    const double hi = std::isinf(hi_f) ? std::copysign(std::ldexp(1.0, 128), x) : hi_f;
    const double dlo = std::fabs(static_cast<double>(x) - lo);
    const double dhi = std::fabs(static_cast<double>(x) - hi);
    uint16_t expected = static_cast<uint16_t>(lo_bits >> 16);
    if (dhi < dlo || (dhi == dlo && (expected & 1))) ++expected;
    ASSERT_EQ(h, expected) << x;
  }
  for (uint32_t h = 0; h < 65536; h += 3) {
    const float v = bf16_to_float(static_cast<uint16_t>(h));
    if (!std::isnan(v)) {
      ASSERT_EQ(float_to_bf16(v), h);
    }
  }
}

TEST(DType, ConvertElementsWithScale) {
  const std::vector<float> src = {0.5f, -3.0f, 100.0f, 1e-3f, 447.0f};
  for (const DType t : {DType::kF32, DType::kF16, DType::kBF16, DType::kFP8E4M3, DType::kFP8E5M2}) {
    std::vector<uint8_t> buf(src.size() * dtype_size(t));
    std::vector<float> back(src.size());
    convert_elements(src.data(), DType::kF32, buf.data(), t, src.size(), 0.5f);
    convert_elements(buf.data(), t, back.data(), DType::kF32, src.size(), 2.0f);
    // Relative precision of each format: half an ulp of its mantissa.
    const double rel = t == DType::kF32       ? 0
                       : t == DType::kF16     ? std::ldexp(1.0, -11)
                       : t == DType::kBF16    ? std::ldexp(1.0, -8)
                       : t == DType::kFP8E4M3 ? std::ldexp(1.0, -4)
                                              : std::ldexp(1.0, -3);
    for (size_t i = 0; i < src.size(); ++i) {
      // Values below the format's normal range lose relative precision: allow its subnormal step.
      const double floor = t == DType::kFP8E4M3   ? std::ldexp(1.0, -9) * 2
                           : t == DType::kFP8E5M2 ? std::ldexp(1.0, -16) * 2
                                                  : 0;
      EXPECT_NEAR(back[i], src[i], std::fabs(src[i]) * rel + floor) << dtype_name(t) << " " << i;
    }
  }
}

}  // namespace
}  // namespace kvserve
