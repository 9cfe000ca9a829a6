// Element types and scalar conversions.
//
// CPU code computes in f32; storage may be bf16, f16 or fp8. Conversions to 16-bit and 8-bit
// formats round to nearest, ties to even. fp8 conversions saturate to the largest finite value
// (CUDA's __NV_SATFINITE), which is what a KV cache wants: an outlier clips instead of turning
// into NaN or inf. e4m3 is the OCP "fn" variant (no infinities, one NaN pattern per sign).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace kvserve {

enum class DType : uint8_t {
  kF32,
  kF16,
  kBF16,
  kFP8E4M3,  // float8_e4m3fn: bias 7, max 448, no inf
  kFP8E5M2,  // float8_e5m2: bias 15, max 57344, has inf
  kI32,
  kI64,
  kU8,
};

size_t dtype_size(DType t);
std::string_view dtype_name(DType t);
bool is_float8(DType t);
bool is_floating(DType t);
// Accepts kvserve's names and the ones SGLang/torch users type: "bf16", "bfloat16", "f16", "half",
// "float16", "f32", "float", "float32", "fp8_e4m3", "float8_e4m3fn", "fp8_e5m2", "int32", ...
// False for an unknown name. (No Status here: this header stays free of fmt for CUDA sources.)
bool parse_dtype(std::string_view name, DType* out);
// The canonical names, for error messages: "f32, f16, bf16, fp8_e4m3, fp8_e5m2, i32, i64, u8".
std::string_view dtype_choices();

uint16_t float_to_bf16(float f);
float bf16_to_float(uint16_t h);
uint16_t float_to_f16(float f);
float f16_to_float(uint16_t h);
uint8_t float_to_fp8_e4m3(float f);
float fp8_e4m3_to_float(uint8_t v);
uint8_t float_to_fp8_e5m2(float f);
float fp8_e5m2_to_float(uint8_t v);

// Converts `n` floating-point elements, computing through f32: dst = src * scale.
// (The KV store passes 1/k_scale as `scale` when it quantises to fp8.)
void convert_elements(const void* src, DType src_type, void* dst, DType dst_type, size_t n,
                      float scale = 1.0f);

}  // namespace kvserve
