#include "kvserve/core/check.h"

#include <cstring>

namespace kvserve::detail {

namespace {
// Shortens an absolute source path to the part under src/ (or tests/) for readable messages.
const char* short_path(const char* file) {
  for (const char* marker : {"/src/", "/tests/", "/bench/"}) {
    if (const char* p = std::strstr(file, marker)) return p + 1;
  }
  return file;
}
}  // namespace

void check_failed(const char* file, int line, const char* expr, const std::string& values,
                  const std::string& context) {
  std::string msg = fmt::format("{}:{}: CHECK failed: {}", short_path(file), line, expr);
  if (!values.empty()) msg += fmt::format(" ({})", values);
  if (!context.empty()) msg += ": " + context;
  throw CheckError(msg);
}

}  // namespace kvserve::detail
