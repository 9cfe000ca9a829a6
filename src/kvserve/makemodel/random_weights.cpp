#include "kvserve/makemodel/random_weights.h"

#include <algorithm>
#include <cmath>
#include <thread>
#include <vector>

#include "kvserve/core/check.h"

namespace kvserve::makemodel {
namespace {

constexpr uint64_t kGolden = 0x9E3779B97F4A7C15ull;
constexpr float kTwoPi = 6.283185307179586f;
constexpr float kInv2Pow32 = 1.0f / 4294967296.0f;

struct Pair {
  float cos_part;
  float sin_part;
};

inline Pair normal_pair(uint64_t key, uint64_t pair) {
  const uint64_t r = splitmix64_mix(key + (pair + 1) * kGolden);
  const float u1 = (static_cast<float>(r >> 32) + 1.0f) * kInv2Pow32;          // (0, 1]
  const float u2 = static_cast<float>(static_cast<uint32_t>(r)) * kInv2Pow32;  // [0, 1)
  const float radius = std::sqrt(-2.0f * std::log(u1));
  const float angle = kTwoPi * u2;
  return {radius * std::cos(angle), radius * std::sin(angle)};
}

}  // namespace

uint64_t splitmix64_mix(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

uint64_t tensor_key(uint64_t seed, std::string_view tensor_name) {
  uint64_t h = 0xcbf29ce484222325ull;  // FNV-1a over the name
  for (const char c : tensor_name) {
    h ^= static_cast<uint8_t>(c);
    h *= 0x100000001b3ull;
  }
  return splitmix64_mix(splitmix64_mix(seed) ^ h);
}

void fill_normal(uint64_t key, uint64_t first, size_t n, float stddev, float* out) {
  size_t j = 0;
  uint64_t e = first;
  if (n > 0 && (e & 1) != 0) {  // starts on the sin half of a pair
    out[j++] = stddev * normal_pair(key, e >> 1).sin_part;
    ++e;
  }
  for (; j + 1 < n; j += 2, e += 2) {
    const Pair p = normal_pair(key, e >> 1);
    out[j] = stddev * p.cos_part;
    out[j + 1] = stddev * p.sin_part;
  }
  if (j < n) out[j] = stddev * normal_pair(key, e >> 1).cos_part;
}

void generate_normal(uint64_t key, uint64_t first, size_t n, float stddev, DType dtype, int threads,
                     float* scratch, void* out) {
  KV_CHECK(dtype == DType::kF32 || dtype == DType::kF16 || dtype == DType::kBF16,
           "generate_normal: {} is not a checkpoint dtype", dtype_name(dtype));
  const size_t elem = dtype_size(dtype);
  auto work = [&](size_t begin, size_t end) {
    fill_normal(key, first + begin, end - begin, stddev, scratch + begin);
    convert_elements(scratch + begin, DType::kF32, static_cast<uint8_t*>(out) + begin * elem, dtype,
                     end - begin);
  };
  const size_t kMinPerThread = 1 << 16;
  const size_t t =
      std::clamp<size_t>(n / kMinPerThread, 1, static_cast<size_t>(std::max(threads, 1)));
  if (t == 1) {
    work(0, n);
    return;
  }
  std::vector<std::thread> pool;
  const size_t per = (n + t - 1) / t;
  for (size_t i = 1; i < t; ++i) {
    const size_t begin = std::min(n, i * per);
    const size_t end = std::min(n, begin + per);
    pool.emplace_back(work, begin, end);
  }
  work(0, std::min(n, per));
  for (std::thread& th : pool)
    th.join();
}

}  // namespace kvserve::makemodel
