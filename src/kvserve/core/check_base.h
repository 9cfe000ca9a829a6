// The part of the CHECK machinery that needs no fmt: CheckError, the failure hook and a plain
// KV_CHECK_MSG(cond, "literal") for code that cannot include fmt (CUDA sources: nvcc's front end
// rejects fmt's consteval format checks). Everything else includes check.h.
#pragma once

#include <stdexcept>
#include <string>

namespace kvserve {

class CheckError : public std::logic_error {
 public:
  using std::logic_error::logic_error;
};

namespace detail {

// Throws CheckError("file:line: CHECK failed: expr (values): context").
[[noreturn]] void check_failed(const char* file, int line, const char* expr,
                               const std::string& values, const std::string& context);

}  // namespace detail
}  // namespace kvserve

#define KV_CHECK_MSG(cond, msg)                                                                    \
  do {                                                                                             \
    if (!(cond)) [[unlikely]] {                                                                    \
      ::kvserve::detail::check_failed(__FILE__, __LINE__, #cond, std::string(), std::string(msg)); \
    }                                                                                              \
  } while (0)
