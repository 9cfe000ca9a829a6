#include "kvserve/core/dtype.h"

#include "kvserve/core/check.h"

#include <bit>
#include <cmath>
#include <cstring>
#include <limits>

namespace kvserve {

size_t dtype_size(DType t) {
  switch (t) {
    case DType::kF32:
      return 4;
    case DType::kF16:
      return 2;
    case DType::kBF16:
      return 2;
    case DType::kFP8E4M3:
      return 1;
    case DType::kFP8E5M2:
      return 1;
    case DType::kI32:
      return 4;
    case DType::kI64:
      return 8;
    case DType::kU8:
      return 1;
  }
  KV_CHECK(false, "unknown dtype {}", static_cast<int>(t));
}

std::string_view dtype_name(DType t) {
  switch (t) {
    case DType::kF32:
      return "f32";
    case DType::kF16:
      return "f16";
    case DType::kBF16:
      return "bf16";
    case DType::kFP8E4M3:
      return "fp8_e4m3";
    case DType::kFP8E5M2:
      return "fp8_e5m2";
    case DType::kI32:
      return "i32";
    case DType::kI64:
      return "i64";
    case DType::kU8:
      return "u8";
  }
  KV_CHECK(false, "unknown dtype {}", static_cast<int>(t));
}

bool is_float8(DType t) {
  return t == DType::kFP8E4M3 || t == DType::kFP8E5M2;
}

bool is_floating(DType t) {
  return t == DType::kF32 || t == DType::kF16 || t == DType::kBF16 || is_float8(t);
}

bool parse_dtype(std::string_view name, DType* out) {
  struct Alias {
    std::string_view name;
    DType type;
  };
  static constexpr Alias kAliases[] = {
      {"f32", DType::kF32},
      {"float", DType::kF32},
      {"float32", DType::kF32},
      {"f16", DType::kF16},
      {"half", DType::kF16},
      {"float16", DType::kF16},
      {"bf16", DType::kBF16},
      {"bfloat16", DType::kBF16},
      {"fp8_e4m3", DType::kFP8E4M3},
      {"float8_e4m3fn", DType::kFP8E4M3},
      {"fp8_e5m2", DType::kFP8E5M2},
      {"float8_e5m2", DType::kFP8E5M2},
      {"i32", DType::kI32},
      {"int32", DType::kI32},
      {"i64", DType::kI64},
      {"int64", DType::kI64},
      {"u8", DType::kU8},
      {"uint8", DType::kU8},
  };
  for (const Alias& a : kAliases) {
    if (a.name == name) {
      *out = a.type;
      return true;
    }
  }
  return false;
}

std::string_view dtype_choices() {
  return "f32, f16, bf16, fp8_e4m3, fp8_e5m2, i32, i64, u8";
}

uint16_t float_to_bf16(float f) {
  uint32_t x = std::bit_cast<uint32_t>(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x0040u);  // qNaN
  x += 0x7fffu + ((x >> 16) & 1u);
  return static_cast<uint16_t>(x >> 16);
}

float bf16_to_float(uint16_t h) {
  return std::bit_cast<float>(static_cast<uint32_t>(h) << 16);
}

uint16_t float_to_f16(float f) {
  // Round to nearest even using the FPU for the subnormal range and integer carry elsewhere.
  constexpr uint32_t kF32Inf = 255u << 23;
  constexpr uint32_t kF16Overflow = (127u + 16u) << 23;  // 2^16: everything >= rounds to inf
  constexpr uint32_t kDenormMagic = ((127u - 15u) + (23u - 10u) + 1u) << 23;
  uint32_t x = std::bit_cast<uint32_t>(f);
  const uint32_t sign = x & 0x80000000u;
  x ^= sign;
  uint32_t out;
  if (x >= kF16Overflow) {
    out = x > kF32Inf ? 0x7e00u : 0x7c00u;
  } else if (x < (113u << 23)) {  // below 2^-14: the f16 result is subnormal or zero
    const float shifted = std::bit_cast<float>(x) + std::bit_cast<float>(kDenormMagic);
    out = std::bit_cast<uint32_t>(shifted) - kDenormMagic;
  } else {
    const uint32_t mant_odd = (x >> 13) & 1u;
    x += (static_cast<uint32_t>(15 - 127) << 23) + 0xfffu;
    x += mant_odd;
    out = x >> 13;
  }
  return static_cast<uint16_t>(out | (sign >> 16));
}

float f16_to_float(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  const uint32_t mant = h & 0x3ffu;
  if (exp == 0) {
    const float mag = std::ldexp(static_cast<float>(mant), -24);
    return std::bit_cast<float>(std::bit_cast<uint32_t>(mag) | sign);
  }
  if (exp == 31) return std::bit_cast<float>(sign | 0x7f800000u | (mant << 13));
  return std::bit_cast<float>(sign | ((exp + 112u) << 23) | (mant << 13));
}

namespace {

// One 8-bit float format: 1 sign bit, kExpBits exponent bits, kManBits mantissa bits.
template <int kExpBits, int kManBits, int kBias, uint8_t kMaxCode, uint8_t kNaNCode>
struct Fp8Format {
  static constexpr int kMinNormalExp = 1 - kBias;

  static uint8_t encode(float f) {
    if (std::isnan(f)) return kNaNCode | (std::signbit(f) ? 0x80 : 0);
    const uint8_t sign = std::signbit(f) ? 0x80 : 0;
    const double a = std::fabs(static_cast<double>(f));
    if (a >= decode_magnitude(kMaxCode)) return sign | kMaxCode;  // saturate (and inf -> max)
    if (a == 0.0) return sign;
    int e;
    std::frexp(a, &e);  // a = m * 2^e with m in [0.5, 1)
    e -= 1;             // a = (1.f) * 2^e
    if (e < kMinNormalExp) {
      // Subnormal: multiples of 2^(kMinNormalExp - kManBits). Rounding may carry into the
      // smallest normal, whose code is the next integer, so the integer is the code.
      const double q = std::nearbyint(std::ldexp(a, kManBits - kMinNormalExp));
      return sign | static_cast<uint8_t>(q);
    }
    double q = std::nearbyint(std::ldexp(a, kManBits - e));  // in [2^man, 2^(man+1)]
    if (q >= static_cast<double>(1 << (kManBits + 1))) {
      q /= 2;
      e += 1;
    }
    const int code = ((e + kBias) << kManBits) | (static_cast<int>(q) - (1 << kManBits));
    return sign | static_cast<uint8_t>(code);
  }

  static double decode_magnitude(uint8_t code) {
    const int exp = (code >> kManBits) & ((1 << kExpBits) - 1);
    const int man = code & ((1 << kManBits) - 1);
    if (exp == 0) return std::ldexp(static_cast<double>(man), kMinNormalExp - kManBits);
    return std::ldexp(1.0 + static_cast<double>(man) / (1 << kManBits), exp - kBias);
  }
};

using E4M3 = Fp8Format<4, 3, 7, 0x7e, 0x7f>;
using E5M2 = Fp8Format<5, 2, 15, 0x7b, 0x7e>;

}  // namespace

uint8_t float_to_fp8_e4m3(float f) {
  return E4M3::encode(f);
}

float fp8_e4m3_to_float(uint8_t v) {
  if ((v & 0x7f) == 0x7f) return std::numeric_limits<float>::quiet_NaN();
  const float mag = static_cast<float>(E4M3::decode_magnitude(v & 0x7f));
  return (v & 0x80) ? -mag : mag;
}

uint8_t float_to_fp8_e5m2(float f) {
  return E5M2::encode(f);
}

// e5m2 is the upper byte of an IEEE half.
float fp8_e5m2_to_float(uint8_t v) {
  return f16_to_float(static_cast<uint16_t>(v) << 8);
}

namespace {

float load_as_float(const void* p, DType t, size_t i) {
  switch (t) {
    case DType::kF32:
      return static_cast<const float*>(p)[i];
    case DType::kF16:
      return f16_to_float(static_cast<const uint16_t*>(p)[i]);
    case DType::kBF16:
      return bf16_to_float(static_cast<const uint16_t*>(p)[i]);
    case DType::kFP8E4M3:
      return fp8_e4m3_to_float(static_cast<const uint8_t*>(p)[i]);
    case DType::kFP8E5M2:
      return fp8_e5m2_to_float(static_cast<const uint8_t*>(p)[i]);
    default:
      KV_CHECK(false, "convert_elements: {} is not a floating type", dtype_name(t));
  }
}

void store_from_float(void* p, DType t, size_t i, float v) {
  switch (t) {
    case DType::kF32:
      static_cast<float*>(p)[i] = v;
      return;
    case DType::kF16:
      static_cast<uint16_t*>(p)[i] = float_to_f16(v);
      return;
    case DType::kBF16:
      static_cast<uint16_t*>(p)[i] = float_to_bf16(v);
      return;
    case DType::kFP8E4M3:
      static_cast<uint8_t*>(p)[i] = float_to_fp8_e4m3(v);
      return;
    case DType::kFP8E5M2:
      static_cast<uint8_t*>(p)[i] = float_to_fp8_e5m2(v);
      return;
    default:
      KV_CHECK(false, "convert_elements: {} is not a floating type", dtype_name(t));
  }
}

}  // namespace

void convert_elements(const void* src, DType src_type, void* dst, DType dst_type, size_t n,
                      float scale) {
  if (src_type == dst_type && scale == 1.0f) {
    std::memcpy(dst, src, n * dtype_size(src_type));
    return;
  }
  for (size_t i = 0; i < n; ++i) {
    store_from_float(dst, dst_type, i, load_as_float(src, src_type, i) * scale);
  }
}

}  // namespace kvserve
