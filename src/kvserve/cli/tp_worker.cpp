// kvserve tp-worker: a worker rank of a tensor-parallel group, launched by rank 0 (`serve`,
// `generate` or `bench-one-batch` with --tp-size > 1; model/tp_worker.h). Hidden from --help: not
// a command for people to run.
#include <fmt/format.h>

#include <memory>

#include "kvserve/cli/commands.h"
#include "kvserve/model/tp_worker.h"

namespace kvserve::cli {

Command add_tp_worker_command(CLI::App& app) {
  auto args = std::make_shared<model::TpWorkerArgs>();
  CLI::App* cmd = app.add_subcommand("tp-worker", "A tensor-parallel worker rank (internal)");
  cmd->group("");  // hidden
  cmd->add_option("--tp-shm", args->shm_name, "The group's shared-memory name")->required();
  cmd->add_option("--tp-rank", args->rank)->required()->check(CLI::Range(1, 63));
  cmd->add_option("--tp-size", args->size)->required()->check(CLI::Range(2, 64));
  return {cmd, [args] {
            const Status s = model::run_tp_worker(*args);
            if (s.is_ok()) return 0;
            fmt::print(stderr, "kvserve tp-worker rank {}: {}\n", args->rank, s.message());
            return 1;
          }};
}

}  // namespace kvserve::cli
