#include "kvserve/disagg/kv_transport.h"

#include <nlohmann/json.hpp>

#include "kvserve/disagg/backends.h"

namespace kvserve::disagg {

std::string_view transport_kind_name(TransportKind kind) {
  switch (kind) {
    case TransportKind::kLoopback:
      return "loopback";
    case TransportKind::kUcx:
      return "ucx";
    case TransportKind::kCudaIpc:
      return "cuda-ipc";
  }
  KV_CHECK(false, "transport kind {}", static_cast<int>(kind));
  return {};
}

Result<TransportKind> parse_transport_kind(std::string_view name) {
  for (const TransportKind kind :
       {TransportKind::kLoopback, TransportKind::kUcx, TransportKind::kCudaIpc}) {
    if (name == transport_kind_name(kind)) return kind;
  }
  return invalid_argument("unknown KV transfer backend '{}' (expected loopback, ucx or cuda-ipc)",
                          name);
}

std::string_view transfer_status_name(TransferStatus status) {
  switch (status) {
    case TransferStatus::kInProgress:
      return "in_progress";
    case TransferStatus::kDone:
      return "done";
    case TransferStatus::kFailed:
      return "failed";
  }
  KV_CHECK(false, "transfer status {}", static_cast<int>(status));
  return {};
}

namespace {

constexpr char kHex[] = "0123456789abcdef";

std::string to_hex(std::span<const uint8_t> bytes) {
  std::string out;
  out.reserve(bytes.size() * 2);
  for (const uint8_t b : bytes) {
    out.push_back(kHex[b >> 4]);
    out.push_back(kHex[b & 15]);
  }
  return out;
}

int hex_digit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

Result<std::vector<uint8_t>> from_hex(std::string_view hex) {
  if (hex.size() % 2 != 0) return invalid_argument("region descriptor: blob has odd hex length");
  std::vector<uint8_t> out(hex.size() / 2);
  for (size_t i = 0; i < out.size(); ++i) {
    const int hi = hex_digit(hex[2 * i]);
    const int lo = hex_digit(hex[2 * i + 1]);
    if (hi < 0 || lo < 0) return invalid_argument("region descriptor: blob is not hex");
    out[i] = static_cast<uint8_t>(hi * 16 + lo);
  }
  return out;
}

void put_u64(std::vector<uint8_t>& out, uint64_t v) {
  for (int i = 0; i < 8; ++i)
    out.push_back(static_cast<uint8_t>(v >> (8 * i)));
}

bool get_u64(std::span<const uint8_t>& in, uint64_t& v) {
  if (in.size() < 8) return false;
  v = 0;
  for (int i = 0; i < 8; ++i)
    v |= static_cast<uint64_t>(in[i]) << (8 * i);
  in = in.subspan(8);
  return true;
}

constexpr uint64_t kMaxDescriptorField = 1ull << 24;  // 16 MiB: far above any real descriptor

}  // namespace

std::string region_descriptor_to_json(const RegionDescriptor& descriptor) {
  nlohmann::json j;
  j["backend"] = descriptor.backend;
  j["bytes"] = descriptor.bytes;
  j["blob"] = to_hex(descriptor.blob);
  return j.dump();
}

Result<RegionDescriptor> region_descriptor_from_json(std::string_view json) {
  const nlohmann::json j = nlohmann::json::parse(json, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    return invalid_argument("region descriptor: not a JSON object");
  }
  RegionDescriptor d;
  const auto backend = j.find("backend");
  if (backend == j.end() || !backend->is_string()) {
    return invalid_argument("region descriptor: backend: expected a string");
  }
  d.backend = backend->get<std::string>();
  const auto bytes = j.find("bytes");
  if (bytes == j.end() || !bytes->is_number_unsigned()) {
    return invalid_argument("region descriptor: bytes: expected an unsigned integer");
  }
  d.bytes = bytes->get<uint64_t>();
  const auto blob = j.find("blob");
  if (blob == j.end() || !blob->is_string()) {
    return invalid_argument("region descriptor: blob: expected a hex string");
  }
  KV_ASSIGN_OR_RETURN(d.blob, from_hex(blob->get_ref<const std::string&>()));
  return d;
}

std::vector<uint8_t> region_descriptor_to_bytes(const RegionDescriptor& descriptor) {
  std::vector<uint8_t> out;
  out.reserve(24 + descriptor.backend.size() + descriptor.blob.size());
  put_u64(out, descriptor.backend.size());
  out.insert(out.end(), descriptor.backend.begin(), descriptor.backend.end());
  put_u64(out, descriptor.bytes);
  put_u64(out, descriptor.blob.size());
  out.insert(out.end(), descriptor.blob.begin(), descriptor.blob.end());
  return out;
}

Result<RegionDescriptor> region_descriptor_from_bytes(std::span<const uint8_t> in) {
  RegionDescriptor d;
  uint64_t n = 0;
  if (!get_u64(in, n) || n > kMaxDescriptorField || n > in.size()) {
    return invalid_argument("region descriptor: truncated backend name");
  }
  d.backend.assign(in.begin(), in.begin() + static_cast<ptrdiff_t>(n));
  in = in.subspan(n);
  if (!get_u64(in, d.bytes)) return invalid_argument("region descriptor: truncated size");
  if (!get_u64(in, n) || n > kMaxDescriptorField || n != in.size()) {
    return invalid_argument("region descriptor: blob length does not match the message");
  }
  d.blob.assign(in.begin(), in.end());
  return d;
}

Result<std::unique_ptr<KvTransport>> create_kv_transport(const TransportOptions& options) {
  if (options.faults.fail_probability < 0 || options.faults.drop_probability < 0 ||
      options.faults.fail_probability + options.faults.drop_probability > 1 ||
      options.faults.delay_ms < 0) {
    return invalid_argument(
        "KV transfer faults: fail {} + drop {} must be probabilities summing to at most 1, delay "
        "{} ms must not be negative",
        options.faults.fail_probability, options.faults.drop_probability, options.faults.delay_ms);
  }
  if (options.transfer_timeout_ms < 0) {
    return invalid_argument("KV transfer timeout {} ms is negative", options.transfer_timeout_ms);
  }
  switch (options.kind) {
    case TransportKind::kLoopback:
      return create_loopback_transport(options);
    case TransportKind::kUcx:
      return create_ucx_transport(options);
    case TransportKind::kCudaIpc:
      return create_cuda_ipc_transport(options);
  }
  return invalid_argument("KV transfer backend {} unknown", static_cast<int>(options.kind));
}

}  // namespace kvserve::disagg
