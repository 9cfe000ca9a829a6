#include "kvserve/disagg/transport_faults.h"

namespace kvserve::disagg {

FaultInjector::FaultInjector(const TransportFaults& faults) : faults_(faults), rng_(faults.seed) {}

FaultDraw FaultInjector::draw() {
  FaultDraw d;
  d.delay = std::chrono::milliseconds(faults_.delay_ms);
  if (faults_.fail_probability <= 0 && faults_.drop_probability <= 0) return d;
  double u = 0;
  {
    std::lock_guard lock(mu_);
    u = std::uniform_real_distribution<double>(0.0, 1.0)(rng_);
  }
  if (u < faults_.fail_probability) {
    d.kind = FaultDraw::Kind::kFail;
  } else if (u < faults_.fail_probability + faults_.drop_probability) {
    d.kind = FaultDraw::Kind::kDrop;
  }
  return d;
}

Status check_write_ops(std::span<const WriteOp> ops, uint64_t local_bytes, uint64_t remote_bytes) {
  if (ops.empty()) return invalid_argument("KV transfer: an empty batch of writes");
  for (size_t i = 0; i < ops.size(); ++i) {
    const WriteOp& op = ops[i];
    if (op.length == 0) return invalid_argument("KV transfer: write {} has length 0", i);
    if (op.src_offset > local_bytes || op.length > local_bytes - op.src_offset) {
      return invalid_argument(
          "KV transfer: write {} reads [{}, +{}) outside the local region of {} bytes", i,
          op.src_offset, op.length, local_bytes);
    }
    if (op.dst_offset > remote_bytes || op.length > remote_bytes - op.dst_offset) {
      return invalid_argument(
          "KV transfer: write {} writes [{}, +{}) outside the peer's region of {} bytes", i,
          op.dst_offset, op.length, remote_bytes);
    }
  }
  return Status::ok();
}

}  // namespace kvserve::disagg
