// The API key check: "Authorization: Bearer KEY", compared in constant time (the time taken
// depends only on the length of what the client sent, never on how much of the key it guessed).
#pragma once

#include <string_view>

namespace kvserve::server {

// True when `authorization` is exactly "Bearer " + key.
bool api_key_matches(std::string_view authorization, std::string_view key);

// Equality whose running time depends only on `given`'s length.
bool constant_time_equal(std::string_view given, std::string_view expected);

}  // namespace kvserve::server
