#include "kvserve/mem/device_req_to_token.h"

#include "kvserve/core/check.h"

namespace kvserve::mem {

Result<std::unique_ptr<DeviceReqToToken>> DeviceReqToToken::create(platform::Platform& platform,
                                                                   int32_t rows, int32_t stride) {
  KV_CHECK(rows >= 1 && stride >= 1, "a mirror of {} rows of {} positions", rows, stride);
  const size_t bytes = static_cast<size_t>(rows) * static_cast<size_t>(stride) * sizeof(int32_t);
  KV_ASSIGN_OR_RETURN(Buffer buffer, platform.allocate_buffer(bytes));
  platform.memset(buffer.data(), 0, bytes);
  return std::unique_ptr<DeviceReqToToken>(
      new DeviceReqToToken(platform, rows, stride, std::move(buffer)));
}

std::vector<int32_t> DeviceReqToToken::read_row(int32_t row, int32_t len) const {
  KV_CHECK(row >= 0 && row < rows() && len >= 0 && len <= stride(), "row {} [0, {})", row, len);
  std::vector<int32_t> out(static_cast<size_t>(len));
  if (len == 0) return out;
  platform_.copy(out.data(), data() + static_cast<int64_t>(row) * stride(),
                 out.size() * sizeof(int32_t), platform::CopyKind::kDeviceToHost);
  platform_.synchronize();
  return out;
}

}  // namespace kvserve::mem
