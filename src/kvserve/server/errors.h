// OpenAI-style errors: {"error": {"message", "type", "param", "code"}} with an HTTP status.
#pragma once

#include <string>

#include "kvserve/core/status.h"

namespace kvserve::server {

struct ApiError {
  int status = 400;
  std::string message;
  std::string type = "invalid_request_error";
  std::string param;  // the offending field, when there is one
  std::string code;
  int retry_after_s = 0;  // > 0: sent as Retry-After (a 503 the client may retry)

  std::string body() const;  // the JSON document
};

ApiError bad_request(std::string message, std::string param = "");
// The HTTP status and type for a Status from the engine (kInvalidArgument -> 400, ...).
ApiError from_status(const Status& s, std::string param = "");

}  // namespace kvserve::server
