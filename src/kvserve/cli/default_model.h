// The model `kvserve serve` and `kvserve generate` use when no --model-path is given: the small
// demo model the project ships in models/demo-lm (docs/demo-models.md).
#pragma once

#include <filesystem>
#include <string>
#include <vector>

namespace kvserve::cli {

// Where the demo model is looked for, in order: $KVSERVE_DEMO_MODEL; models/demo-lm beside the
// binary's directory (a build tree inside the checkout: build/kvserve -> models/demo-lm);
// share/kvserve/models/demo-lm above it (an installed layout); the source tree it was built from.
std::vector<std::filesystem::path> demo_model_candidates();

// Fills an empty `model_path` with the first candidate holding a config.json. On failure prints
// which paths were tried and returns false.
bool resolve_model_path(std::string& model_path, const char* command);

}  // namespace kvserve::cli
