#include "kvserve/server/errors.h"

#include <nlohmann/json.hpp>

namespace kvserve::server {

std::string ApiError::body() const {
  nlohmann::json e = {{"message", message},
                      {"type", type},
                      {"param", param.empty() ? nlohmann::json(nullptr) : nlohmann::json(param)},
                      {"code", code.empty() ? nlohmann::json(status) : nlohmann::json(code)}};
  // A message may quote client bytes (a path, a header): invalid UTF-8 becomes U+FFFD instead of
  // an exception.
  return nlohmann::json{{"error", e}}.dump(-1, ' ', false,
                                           nlohmann::json::error_handler_t::replace);
}

ApiError bad_request(std::string message, std::string param) {
  return {400, std::move(message), "invalid_request_error", std::move(param), ""};
}

ApiError from_status(const Status& s, std::string param) {
  switch (s.code()) {
    case StatusCode::kInvalidArgument:
      return bad_request(s.message(), std::move(param));
    case StatusCode::kNotFound:
      return {404, s.message(), "not_found_error", std::move(param), ""};
    case StatusCode::kUnimplemented:
      return {400, s.message(), "invalid_request_error", std::move(param), "unsupported"};
    case StatusCode::kUnavailable:
      return {503, s.message(), "service_unavailable", "", ""};
    case StatusCode::kOutOfMemory:
      return {503, s.message(), "service_unavailable", "", ""};
    default:
      return {500, s.message(), "internal_error", "", ""};
  }
}

}  // namespace kvserve::server
