#include "kvserve/core/logging.h"
#include "kvserve/core/log_output.h"

#include <spdlog/sinks/stdout_color_sinks.h>

#include <memory>
#include <string>

namespace kvserve {

void log_to_stderr() {
  const auto level = spdlog::default_logger()->level();
  auto logger =
      std::make_shared<spdlog::logger>("", std::make_shared<spdlog::sinks::stderr_color_sink_mt>());
  logger->set_level(level);
  spdlog::set_default_logger(std::move(logger));
}

bool set_log_level(std::string_view level) {
  const auto parsed = spdlog::level::from_str(std::string(level));
  if (parsed == spdlog::level::off && level != "off") return false;
  spdlog::set_level(parsed);
  return true;
}

}  // namespace kvserve
