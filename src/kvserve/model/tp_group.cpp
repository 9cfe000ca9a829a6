#include "kvserve/model/tp_group.h"

#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <thread>

#include <fmt/format.h>

#include "kvserve/core/logging.h"
#include "kvserve/dist/nccl_communicator.h"
#include "kvserve/model/model_runner.h"
#include "kvserve/model/tp_messages.h"

extern char** environ;

namespace kvserve::model {

namespace {

std::string describe_exit(int status) {
  if (WIFEXITED(status)) return fmt::format("exited with status {}", WEXITSTATUS(status));
  if (WIFSIGNALED(status)) return fmt::format("was killed by signal {}", WTERMSIG(status));
  return "stopped";
}

}  // namespace

Result<std::unique_ptr<TpGroup>> TpGroup::launch(const std::filesystem::path& model_dir,
                                                 const ModelRunnerOptions& o) {
  std::unique_ptr<TpGroup> g(new TpGroup());
  const std::string name = dist::unique_shm_name();
  const std::string exe = o.tp_worker_executable.empty() ? std::string("/proc/self/exe")
                                                         : o.tp_worker_executable.string();
  for (int32_t r = 1; r < o.tp_size; ++r) {
    std::vector<std::string> args = {
        exe, "tp-worker", "--tp-shm", name, "--tp-rank", std::to_string(r), "--tp-size",
        std::to_string(o.tp_size),
        // The workers log at rank 0's level (--log-level).
        "--log-level", fmt::to_string(spdlog::level::to_string_view(spdlog::get_level()))};
    std::vector<char*> argv;
    for (std::string& a : args)
      argv.push_back(a.data());
    argv.push_back(nullptr);
    pid_t pid = 0;
    const int err = posix_spawn(&pid, exe.c_str(), nullptr, nullptr, argv.data(), environ);
    if (err != 0) {
      g->fail("launch failed");
      return unavailable("--tp-size {}: cannot launch worker rank {} ({}): {}", o.tp_size, r, exe,
                         std::strerror(err));
    }
    g->workers_.push_back(pid);
  }
  dist::CpuCommunicatorOptions co;
  co.name = name;
  co.rank = 0;
  co.size = o.tp_size;
  TpGroup* self = g.get();
  co.attach_check = [self] { return self->check_workers("before joining the group"); };
  auto control = dist::CpuCommunicator::create(co);
  if (!control.is_ok()) return control.status();  // ~TpGroup reaps the workers
  g->control_ = std::move(control).value();

  TpSetup setup;
  setup.model_dir = model_dir;
  setup.nccl = !o.device.is_cpu();
  if (setup.nccl) {
    auto id = dist::nccl_unique_id();
    if (!id.is_ok()) {
      g->fail(id.status().message());
      return id.status();
    }
    setup.nccl_id = *id;
  }
  const std::vector<uint8_t> bytes = encode_setup(setup, o);
  if (Status s = send_message(*g->control_, TpMessageKind::kSetup, bytes); !s.is_ok()) {
    g->fail(s.message());
    return s;
  }
  if (setup.nccl) {
    auto data = dist::create_nccl_communicator(setup.nccl_id, 0, o.tp_size, o.device.index);
    if (!data.is_ok()) {
      g->fail(data.status().message());
      return data.status();
    }
    g->data_ = std::move(data).value();
  }
  KV_LOG_INFO("tensor parallel: {} ranks ({} workers launched), forward collectives over {}",
              o.tp_size, g->workers_.size(), setup.nccl ? "nccl" : "cpu shared memory");
  return g;
}

TpGroup::~TpGroup() {
  if (control_ != nullptr && !failed_) {
    if (!send_message(*control_, TpMessageKind::kShutdown, {}).is_ok()) failed_ = true;
  }
  // Workers exit after shutdown, or on their own once the group failed; a grace period, then
  // SIGKILL for any that does not.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  for (const pid_t pid : workers_) {
    if (pid <= 0) continue;  // reaped already
    // Without a control channel the workers wait to attach to a group that never forms.
    if (control_ == nullptr) kill(pid, SIGKILL);
    int status = 0;
    while (waitpid(pid, &status, WNOHANG) == 0) {
      if (std::chrono::steady_clock::now() > deadline) {
        kill(pid, SIGKILL);
        waitpid(pid, &status, 0);
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  }
  data_.reset();
  control_.reset();
}

Status TpGroup::check_workers(std::string_view when) {
  for (size_t i = 0; i < workers_.size(); ++i) {
    int status = 0;
    if (workers_[i] > 0 && waitpid(workers_[i], &status, WNOHANG) == workers_[i]) {
      workers_[i] = -1;  // reaped
      return unavailable("tensor-parallel worker rank {} {} {}", i + 1, describe_exit(status),
                         when);
    }
  }
  return Status::ok();
}

TensorParallel TpGroup::tp() const {
  return TensorParallel{.comm = data_ != nullptr ? data_.get() : control_.get(),
                        .control = control_.get()};
}

Status TpGroup::ready() {
  return control_->barrier();
}

Status TpGroup::announce_forward(const mem::ForwardBatch& batch) {
  encode_forward(batch, message_);
  return send_message(*control_, TpMessageKind::kForward, message_);
}

void TpGroup::watch() {
  if (failed_) return;
  Status s = check_workers("during a forward");
  if (s.is_ok() && data_ != nullptr) s = data_->check();
  if (s.is_ok()) return;
  KV_LOG_ERROR("tensor parallel: {}; aborting the group", s.message());
  fail(s.message());
}

void TpGroup::fail(std::string_view reason) {
  if (!failed_) failure_ = unavailable("tensor-parallel group failed: {}", reason);
  failed_ = true;
  if (control_ != nullptr) control_->abort(reason);
  if (data_ != nullptr) data_->abort(reason);
}

}  // namespace kvserve::model
