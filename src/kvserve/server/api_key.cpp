#include "kvserve/server/api_key.h"

#include <cstdint>

namespace kvserve::server {

bool constant_time_equal(std::string_view given, std::string_view expected) {
  // Every byte of `given` is compared (against `expected` cycled), whatever the mismatches;
  // the volatile accumulator keeps the compiler from stopping at the first difference.
  volatile uint8_t diff = given.size() == expected.size() ? 0 : 1;
  if (expected.empty()) return given.empty();
  for (size_t i = 0; i < given.size(); ++i) {
    diff = diff | static_cast<uint8_t>(given[i] ^ expected[i % expected.size()]);
  }
  return diff == 0;
}

bool api_key_matches(std::string_view authorization, std::string_view key) {
  constexpr std::string_view kScheme = "Bearer ";
  if (authorization.substr(0, kScheme.size()) != kScheme) return false;
  return constant_time_equal(authorization.substr(kScheme.size()), key);
}

}  // namespace kvserve::server
