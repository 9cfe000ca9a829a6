// Logging: spdlog (header-only, with Debian's fmt) behind kvserve's own names.
#pragma once

#include <spdlog/spdlog.h>

namespace kvserve {

// Sets the global level from a name ("trace", "debug", "info", "warn", "error"); false if unknown.
bool set_log_level(std::string_view level);

}  // namespace kvserve

#define KV_LOG_DEBUG(...) SPDLOG_DEBUG(__VA_ARGS__)
#define KV_LOG_INFO(...) SPDLOG_INFO(__VA_ARGS__)
#define KV_LOG_WARN(...) SPDLOG_WARN(__VA_ARGS__)
#define KV_LOG_ERROR(...) SPDLOG_ERROR(__VA_ARGS__)
