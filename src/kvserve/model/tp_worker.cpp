#include "kvserve/model/tp_worker.h"

#include <sys/prctl.h>

#include <csignal>
#include <memory>
#include <vector>

#include "kvserve/core/logging.h"
#include "kvserve/dist/cpu_communicator.h"
#include "kvserve/dist/nccl_communicator.h"
#include "kvserve/mem/req_to_token_pool.h"
#include "kvserve/model/model_runner.h"
#include "kvserve/model/tp_messages.h"

namespace kvserve::model {

namespace {

// The batch's rows, as the scheduler's table holds them on [0, seq_len): the rewrites below the
// new tokens, then the new slots (what a device mirror writes; mem/device_req_to_token.h).
void apply_rows(const mem::ForwardBatch& b, mem::ReqToTokenPool& rows) {
  const mem::ForwardBatch::RowRewrites& rw = b.row_rewrites;
  for (int32_t i = 0; i < b.batch_size(); ++i) {
    const int32_t row = b.req_pool_indices[i];
    if (!rw.start.empty()) {
      const auto first = static_cast<size_t>(rw.indptr[i]);
      const auto count = static_cast<size_t>(rw.indptr[i + 1] - rw.indptr[i]);
      rows.write(row, rw.start[i], std::span<const int32_t>(rw.slots).subspan(first, count));
    }
    rows.write(row, b.kv_start(i) + b.prefix_lens[i],
               std::span<const int32_t>(b.out_cache_loc)
                   .subspan(static_cast<size_t>(b.extend_start_loc[i]),
                            static_cast<size_t>(b.extend_lens[i])));
  }
}

Status check_batch(const mem::ForwardBatch& b, const mem::ReqToTokenPool& rows) {
  const auto n = static_cast<size_t>(b.batch_size());
  bool ok = b.prefix_lens.size() == n && b.extend_lens.size() == n &&
            b.extend_start_loc.size() == n && b.req_pool_indices.size() == n &&
            b.positions.size() == b.input_ids.size() &&
            b.out_cache_loc.size() == b.input_ids.size() &&
            (b.row_rewrites.start.empty() ||
             (b.row_rewrites.start.size() == n && b.row_rewrites.indptr.size() == n + 1));
  for (size_t i = 0; ok && i < n; ++i) {
    ok = b.req_pool_indices[i] > 0 && b.req_pool_indices[i] <= rows.size() &&
         b.extend_start_loc[i] >= 0 && b.extend_lens[i] >= 0 &&
         b.extend_start_loc[i] + b.extend_lens[i] <= b.num_tokens() && b.prefix_lens[i] >= 0 &&
         b.prefix_lens[i] + b.extend_lens[i] <= rows.max_context_len();
    if (ok && !b.row_rewrites.start.empty()) {
      const int32_t lo = b.row_rewrites.indptr[i];
      const int32_t hi = b.row_rewrites.indptr[i + 1];
      ok = lo >= 0 && lo <= hi && hi <= static_cast<int32_t>(b.row_rewrites.slots.size()) &&
           b.row_rewrites.start[i] >= 0 &&
           b.row_rewrites.start[i] + (hi - lo) <= rows.max_context_len();
    }
  }
  if (!ok) return invalid_argument("a malformed forward command");
  return Status::ok();
}

}  // namespace

Status run_tp_worker(const TpWorkerArgs& args) {
  // Rank 0 is this process's parent: its death ends this worker too, whatever it was doing.
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  dist::CpuCommunicatorOptions co;
  co.name = args.shm_name;
  co.rank = args.rank;
  co.size = args.size;
  KV_ASSIGN_OR_RETURN(auto control, dist::CpuCommunicator::create(co));
  // Any failure from here on marks the group failed with its reason (rank 0 reports it).
  auto give_up = [&](const Status& s) {
    control->abort(s.message());
    return s;
  };
  TpMessageKind kind{};
  std::vector<uint8_t> payload;
  if (Status s = receive_message(*control, kind, payload); !s.is_ok()) return s;
  if (kind != TpMessageKind::kSetup) {
    return give_up(invalid_argument("expected the setup message first"));
  }
  TpSetup setup;
  ModelRunnerOptions options;
  if (Status s = decode_setup(payload, setup, options); !s.is_ok()) return give_up(s);
  if (!options.device.is_cpu()) options.device.index += args.rank;  // --base-gpu-id + rank
  std::unique_ptr<dist::Communicator> data;
  if (setup.nccl) {
    auto comm =
        dist::create_nccl_communicator(setup.nccl_id, args.rank, args.size, options.device.index);
    if (!comm.is_ok()) return give_up(comm.status());
    data = std::move(comm).value();
  }
  options.tp = TensorParallel{.comm = data != nullptr ? data.get() : control.get(),
                              .control = control.get()};
  auto runner = ModelRunner::create(setup.model_dir, options);
  if (!runner.is_ok()) return give_up(runner.status());
  KV_LOG_INFO("tp-worker rank {}: {}", args.rank, (*runner)->summary());
  const mem::KvMemoryShape shape = (*runner)->kv_shape();
  mem::ReqToTokenPool rows(shape.max_running_requests, shape.row_len);
  {
    std::vector<int32_t> all;
    KV_CHECK(rows.alloc(shape.max_running_requests, all).is_ok(), "a fresh table's rows");
  }
  if (Status s = control->barrier(); !s.is_ok()) return s;  // every rank ready
  std::vector<int32_t> tokens;
  for (;;) {
    if (Status s = receive_message(*control, kind, payload); !s.is_ok()) return s;
    if (kind == TpMessageKind::kShutdown) return Status::ok();
    if (kind != TpMessageKind::kForward) {
      return give_up(invalid_argument("unexpected message kind {}", static_cast<uint64_t>(kind)));
    }
    mem::ForwardBatch batch;
    if (Status s = decode_forward(payload, batch); !s.is_ok()) return give_up(s);
    if (Status s = check_batch(batch, rows); !s.is_ok()) return give_up(s);
    apply_rows(batch, rows);
    batch.req_to_token = &rows;
    // Every forward variant runs the same collectives (and the same graph or eager path for the
    // same batch); the tokens are dropped.
    if (Status s = (*runner)->forward_greedy(batch, tokens); !s.is_ok()) return give_up(s);
  }
}

}  // namespace kvserve::model
