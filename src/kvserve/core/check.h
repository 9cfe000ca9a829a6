// CHECK macros: violated invariants (bugs in kvserve, never user errors).
//
// A failed check throws kvserve::CheckError whose message names file:line, the expression and,
// for the comparison forms, both values:
//   KV_CHECK(row != 0, "row 0 is the padding row");
//   KV_CHECK_EQ(value.size() % page_size, 0u, "node {} holds a partial page", id);
// Expected failures (out of KV memory, a bad file) are Status values instead: see status.h.
#pragma once

#include <fmt/format.h>

#include <string>

#include "kvserve/core/check_base.h"

namespace kvserve {
namespace detail {

inline std::string check_context() {
  return {};
}
template <typename... Args>
std::string check_context(fmt::format_string<Args...> f, Args&&... args) {
  return fmt::format(f, std::forward<Args>(args)...);
}

template <typename A, typename B>
std::string check_values(const A& a, const B& b) {
  if constexpr (fmt::is_formattable<A>::value && fmt::is_formattable<B>::value) {
    return fmt::format("{} vs {}", a, b);
  } else {
    return "(values not printable)";
  }
}

}  // namespace detail
}  // namespace kvserve

#define KV_CHECK(cond, ...)                                                           \
  do {                                                                                \
    if (!(cond)) [[unlikely]] {                                                       \
      ::kvserve::detail::check_failed(__FILE__, __LINE__, #cond, std::string(),       \
                                      ::kvserve::detail::check_context(__VA_ARGS__)); \
    }                                                                                 \
  } while (0)

#define KV_CHECK_OP_(op, a, b, ...)                                                              \
  do {                                                                                           \
    const auto& kv_check_a_ = (a);                                                               \
    const auto& kv_check_b_ = (b);                                                               \
    if (!(kv_check_a_ op kv_check_b_)) [[unlikely]] {                                            \
      ::kvserve::detail::check_failed(__FILE__, __LINE__, #a " " #op " " #b,                     \
                                      ::kvserve::detail::check_values(kv_check_a_, kv_check_b_), \
                                      ::kvserve::detail::check_context(__VA_ARGS__));            \
    }                                                                                            \
  } while (0)

#define KV_CHECK_EQ(a, b, ...) KV_CHECK_OP_(==, a, b __VA_OPT__(, ) __VA_ARGS__)
#define KV_CHECK_NE(a, b, ...) KV_CHECK_OP_(!=, a, b __VA_OPT__(, ) __VA_ARGS__)
#define KV_CHECK_LT(a, b, ...) KV_CHECK_OP_(<, a, b __VA_OPT__(, ) __VA_ARGS__)
#define KV_CHECK_LE(a, b, ...) KV_CHECK_OP_(<=, a, b __VA_OPT__(, ) __VA_ARGS__)
#define KV_CHECK_GT(a, b, ...) KV_CHECK_OP_(>, a, b __VA_OPT__(, ) __VA_ARGS__)
#define KV_CHECK_GE(a, b, ...) KV_CHECK_OP_(>=, a, b __VA_OPT__(, ) __VA_ARGS__)
