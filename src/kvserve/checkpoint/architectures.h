// The architectures load_model_config (config.h) accepts, with what kvserve runs of each: the
// rows of README's supported-models table (`kvserve supported-models`).
#pragma once

#include <string_view>
#include <vector>

namespace kvserve::checkpoint {

struct SupportedArchitecture {
  std::string_view name;        // config.json architectures[0]
  std::string_view model_type;  // config.json model_type
  std::string_view summary;     // what kvserve runs of it
};

// In the order of config.cpp's table. Whisper's (whisper_config.h) is not among them.
std::vector<SupportedArchitecture> supported_architecture_table();

}  // namespace kvserve::checkpoint
