// The models the CLI uses when no --model-path is given: the small demo models the project ships
// (docs/demo-models.md): models/demo-lm for `serve` and `generate`, models/demo-whisper for
// `transcribe`.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

namespace kvserve::cli {

struct DemoModel {
  const char* dir;  // folder name under models/
  const char* env;  // environment variable that overrides where it is looked for
};

inline constexpr DemoModel kDemoLm{"demo-lm", "KVSERVE_DEMO_MODEL"};
inline constexpr DemoModel kDemoWhisper{"demo-whisper", "KVSERVE_DEMO_WHISPER"};

// Where a demo model is looked for, in order: $<env>; models/<dir> beside the binary's directory
// (a build tree inside the checkout: build/kvserve -> models/demo-lm); share/kvserve/models/<dir>
// above it (an installed layout); the source tree it was built from.
std::vector<std::filesystem::path> demo_model_candidates(const DemoModel& demo = kDemoLm);

// Fills an empty `model_path` with the first candidate holding a config.json. On failure prints
// which paths were tried and returns false.
bool resolve_model_path(std::string& model_path, const char* command,
                        const DemoModel& demo = kDemoLm);

}  // namespace kvserve::cli
