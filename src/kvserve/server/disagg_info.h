// What a disaggregated server shows about itself: its role, control-plane port and KV layout
// (GET /disaggregation/bootstrap, read by the router) and its hand-off counters
// (/get_server_info's "disaggregation").
#pragma once

#include <nlohmann/json.hpp>

#include "kvserve/engine/engine.h"

namespace kvserve::server {

nlohmann::ordered_json disagg_bootstrap_json(const engine::Engine& engine);
nlohmann::ordered_json disagg_stats_json(const engine::DisaggStats& s);

}  // namespace kvserve::server
