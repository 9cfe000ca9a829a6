#include "kvserve/server/disagg_info.h"

#include "kvserve/pd/messages.h"

namespace kvserve::server {

using ordered_json = nlohmann::ordered_json;

ordered_json disagg_bootstrap_json(const engine::Engine& engine) {
  ordered_json j = {{"mode", engine::disagg_mode_name(engine.disagg_mode())}};
  if (engine.disagg_mode() == engine::DisaggMode::kNone) return j;
  const pd::KvLayout& l = engine.disagg_layout();
  j["bootstrap_port"] = engine.disagg_bootstrap_port();
  j["transfer_backend"] = disagg::transport_kind_name(engine.options().disagg.transport);
  j["layout"] = ordered_json::parse(pd::layout_to_json(l));
  return j;
}

ordered_json disagg_stats_json(const engine::DisaggStats& s) {
  const auto per_success = [&](double total) {
    return s.succeeded > 0 ? total / static_cast<double>(s.succeeded) : 0.0;
  };
  const double gbps =
      s.transfer_seconds > 0 ? static_cast<double>(s.transfer_bytes) / s.transfer_seconds / 1e9 : 0;
  return {{"mode", engine::disagg_mode_name(s.mode)},
          {"bootstrapping", s.bootstrapping},
          {"waiting_for_input", s.waiting_for_input},
          {"transferring", s.transferring},
          {"draining", s.draining},
          {"peers", s.peers},
          {"succeeded", s.succeeded},
          {"failed", s.failed},
          {"timeouts", s.timeouts},
          {"aborted", s.aborted},
          {"refused_peers", s.refused_peers},
          {"transfers", s.transfers},
          {"transfer_failures", s.transfer_failures},
          {"transfer_bytes", s.transfer_bytes},
          {"transfer_gb_per_s", gbps},
          {"transfer_mean_latency_s",
           s.transfers > 0 ? s.transfer_seconds / static_cast<double>(s.transfers) : 0.0},
          {"transfer_max_latency_s", s.transfer_max_seconds},
          {"transfer_device_gb_per_s",
           s.transfer_device_seconds > 0
               ? static_cast<double>(s.transfer_device_bytes) / s.transfer_device_seconds / 1e9
               : 0.0},
          {"handoff_mean_s", per_success(s.handoff_seconds)},
          {"bootstrap_mean_s", per_success(s.bootstrap_seconds)},
          {"forward_mean_s", per_success(s.forward_seconds)},
          {"last_transfer_mean_s", per_success(s.last_transfer_seconds)},
          {"wait_mean_s", per_success(s.wait_seconds)},
          {"staging_tokens", s.staging_tokens},
          {"staging_used_tokens", s.staging_used_tokens},
          {"staged_chunks", s.staged_chunks}};
}

}  // namespace kvserve::server
