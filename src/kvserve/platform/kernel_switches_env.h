// Reading the CUDA kernels' A/B switches (kernel_switches.h) from the environment: the one place
// kvserve reads KVSERVE_* tuning variables, called once by each command-line tool at startup.
#pragma once

#include <string>

#include "kvserve/core/status.h"
#include "kvserve/platform/kernel_switches.h"

namespace kvserve::platform {

// The switches the environment sets (unset variables keep the defaults); kInvalidArgument naming
// the variable and its valid values for anything else ("KVSERVE_PDL=yes: expected 0 or 1").
Result<KernelSwitches> kernel_switches_from_env();
// "fused_kv_store on, decode_tc on, prefill_variant auto, decode_tc_stages auto, skinny_gemm on,
// pdl on, split_counters on" (the startup log line).
std::string describe(const KernelSwitches& s);

}  // namespace kvserve::platform
