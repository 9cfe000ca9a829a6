#include "kvserve/platform/kernel_switches_env.h"

#include <cstdlib>
#include <string_view>

#include "kvserve/platform/ops/paged_prefill.h"

namespace kvserve::platform {
namespace {

// The variable's value, or null when unset or empty.
const char* env(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? v : nullptr;
}

Status read_flag(const char* name, bool* out) {
  const char* v = env(name);
  if (v == nullptr) return Status::ok();
  const std::string_view s(v);
  if (s != "0" && s != "1") return invalid_argument("{}={}: expected 0 or 1", name, s);
  *out = s == "1";
  return Status::ok();
}

const char* on_off(bool b) {
  return b ? "on" : "off";
}

}  // namespace

Result<KernelSwitches> kernel_switches_from_env() {
  KernelSwitches s;
  KV_RETURN_IF_ERROR(read_flag("KVSERVE_FUSED_KV_STORE", &s.fused_kv_store));
  KV_RETURN_IF_ERROR(read_flag("KVSERVE_DECODE_TC", &s.decode_tc));
  KV_RETURN_IF_ERROR(read_flag("KVSERVE_SKINNY_GEMM", &s.skinny_gemm));
  KV_RETURN_IF_ERROR(read_flag("KVSERVE_PDL", &s.pdl));
  KV_RETURN_IF_ERROR(read_flag("KVSERVE_SPLIT_COUNTERS", &s.split_counters));
  KV_RETURN_IF_ERROR(read_flag("KVSERVE_PREFILL_TMA", &s.prefill_tma));
  KV_RETURN_IF_ERROR(read_flag("KVSERVE_PREFILL_NEW_ROWS", &s.prefill_new_rows));
  if (const char* v = env("KVSERVE_PREFILL_VARIANT")) {
    s.prefill_variant = ops::parse_prefill_variant(v);
    if (s.prefill_variant == ops::PrefillVariant::kAuto && std::string_view(v) != "auto") {
      return invalid_argument(
          "KVSERVE_PREFILL_VARIANT={}: expected auto, sm90, sm90pp, mma, m64w4, m128w8 or m128w4",
          v);
    }
  }
  if (const char* v = env("KVSERVE_DECODE_TC_STAGES")) {
    const std::string_view st(v);
    if (st == "auto") {
      s.decode_tc_stages = 0;
    } else if (st == "2" || st == "3" || st == "4") {
      s.decode_tc_stages = st[0] - '0';
    } else {
      return invalid_argument("KVSERVE_DECODE_TC_STAGES={}: expected auto, 2, 3 or 4", st);
    }
  }
  return s;
}

std::string describe(const KernelSwitches& s) {
  return fmt::format(
      "fused_kv_store {}, decode_tc {}, prefill_variant {}, decode_tc_stages {}, skinny_gemm {}, "
      "pdl {}, split_counters {}, prefill_tma {}, prefill_new_rows {}",
      on_off(s.fused_kv_store), on_off(s.decode_tc), ops::prefill_variant_name(s.prefill_variant),
      s.decode_tc_stages == 0 ? std::string("auto") : std::to_string(s.decode_tc_stages),
      on_off(s.skinny_gemm), on_off(s.pdl), on_off(s.split_counters), on_off(s.prefill_tma),
      on_off(s.prefill_new_rows));
}

}  // namespace kvserve::platform
