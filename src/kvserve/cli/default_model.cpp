#include "kvserve/cli/default_model.h"

#include <fmt/format.h>
#include <unistd.h>

#include <cstdlib>

#include "kvserve/core/logging.h"

namespace kvserve::cli {

namespace fs = std::filesystem;

std::vector<fs::path> demo_model_candidates(const DemoModel& demo) {
  std::vector<fs::path> out;
  if (const char* env = std::getenv(demo.env); env != nullptr && *env != '\0') {
    out.emplace_back(env);
  }
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    const fs::path dir = exe.parent_path();
    out.push_back(dir.parent_path() / "models" / demo.dir);
    out.push_back(dir.parent_path() / "share" / "kvserve" / "models" / demo.dir);
  }
#ifdef KVSERVE_SOURCE_MODELS_DIR
  out.push_back(fs::path(KVSERVE_SOURCE_MODELS_DIR) / demo.dir);
#endif
  return out;
}

bool resolve_model_path(std::string& model_path, const char* command, const DemoModel& demo) {
  if (!model_path.empty()) return true;
  const std::vector<fs::path> candidates = demo_model_candidates(demo);
  for (const fs::path& p : candidates) {
    std::error_code ec;
    if (fs::is_regular_file(p / "config.json", ec)) {
      model_path = p.string();
      KV_LOG_INFO("no --model-path: using the demo model {} (docs/demo-models.md)", model_path);
      return true;
    }
  }
  std::string tried;
  for (const fs::path& p : candidates)
    tried += fmt::format("\n  {}", p.string());
  fmt::print(stderr,
             "kvserve {}: no --model-path given and the demo model was not found; looked in:{}\n"
             "Pass --model-path DIR (a Hugging Face checkpoint directory) or set {}.\n",
             command, tried, demo.env);
  return false;
}

}  // namespace kvserve::cli
