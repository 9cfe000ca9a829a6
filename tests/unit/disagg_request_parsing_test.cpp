// The disaggregation fields of the generation APIs (bootstrap_host, bootstrap_port,
// bootstrap_room): carried into the engine submission when valid, a 400 naming the field
// otherwise, and one sequence per room.
#include <gtest/gtest.h>

#include "kvserve/server/request_parsing.h"

namespace kvserve::server {
namespace {

using json = nlohmann::json;

ModelLimits limits() {
  ModelLimits m;
  m.context_len = 1024;
  m.vocab_size = 4096;
  return m;
}

template <typename T>
const ApiError* error_of(const Parsed<T>& p) {
  return std::get_if<ApiError>(&p);
}

TEST(DisaggRequestParsingTest, GenerateCarriesTheTarget) {
  const uint64_t room = (uint64_t{1} << 63) - 1;  // the largest room
  const json body = {{"input_ids", {1, 2, 3}},
                     {"bootstrap_host", "10.0.0.7"},
                     {"bootstrap_port", 8998},
                     {"bootstrap_room", room}};
  const auto parsed = parse_generate(body, limits());
  ASSERT_EQ(error_of(parsed), nullptr) << error_of(parsed)->message;
  const auto& spec = std::get<NativeGenerateRequest>(parsed).items.at(0);
  ASSERT_TRUE(spec.disagg.has_value());
  EXPECT_EQ(spec.disagg->bootstrap_host, "10.0.0.7");
  EXPECT_EQ(spec.disagg->bootstrap_port, 8998);
  EXPECT_EQ(spec.disagg->room, room);
  // Without a room: served alone.
  const auto plain = parse_generate({{"input_ids", {1, 2, 3}}}, limits());
  EXPECT_FALSE(std::get<NativeGenerateRequest>(plain).items.at(0).disagg.has_value());
}

TEST(DisaggRequestParsingTest, BadFieldsAreNamed) {
  const json base = {{"input_ids", {1, 2, 3}}};
  struct Case {
    json patch;
    std::string param;
  };
  const Case cases[] = {
      {{{"bootstrap_room", -1}}, "bootstrap_room"},
      {{{"bootstrap_room", "12"}}, "bootstrap_room"},
      {{{"bootstrap_room", uint64_t{1} << 63}}, "bootstrap_room"},
      {{{"bootstrap_room", 5}, {"bootstrap_port", 0}}, "bootstrap_port"},
      {{{"bootstrap_room", 5}, {"bootstrap_port", 70000}}, "bootstrap_port"},
      {{{"bootstrap_room", 5}, {"bootstrap_host", 7}}, "bootstrap_host"},
      {{{"bootstrap_host", "h"}}, "bootstrap_host"},                                 // no room
      {{{"bootstrap_room", 5}, {"input_ids", {{1, 2}, {3, 4}}}}, "bootstrap_room"},  // two prompts
  };
  for (const Case& c : cases) {
    json body = base;
    body.update(c.patch);
    const auto parsed = parse_generate(body, limits());
    const ApiError* e = error_of(parsed);
    ASSERT_NE(e, nullptr) << body.dump();
    EXPECT_EQ(e->status, 400);
    EXPECT_EQ(e->param, c.param) << body.dump() << ": " << e->message;
  }
}

TEST(DisaggRequestParsingTest, CompletionsTakeOneSequencePerRoom) {
  const json ok = {{"prompt", json::array({1, 2, 3})}, {"bootstrap_room", 9}};
  const auto parsed = parse_completion(ok, limits());
  ASSERT_EQ(error_of(parsed), nullptr);
  EXPECT_EQ(std::get<CompletionRequest>(parsed).prompts.at(0).disagg->room, 9u);
  json two = ok;
  two["n"] = 2;
  const auto bad = parse_completion(two, limits());
  ASSERT_NE(error_of(bad), nullptr);
  EXPECT_EQ(error_of(bad)->param, "bootstrap_room");
}

}  // namespace
}  // namespace kvserve::server
