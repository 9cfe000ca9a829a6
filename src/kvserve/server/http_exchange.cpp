#include "kvserve/server/http_exchange.h"

#include <strings.h>

namespace kvserve::server {

std::string HttpRequest::header(std::string_view name) const {
  for (const auto& [k, v] : headers) {
    if (k.size() == name.size() && strncasecmp(k.data(), name.data(), k.size()) == 0) return v;
  }
  return "";
}

}  // namespace kvserve::server
