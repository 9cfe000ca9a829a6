// CHECK macros, Status and Result.
#include <gtest/gtest.h>

#include <string>

#include "kvserve/core/check.h"
#include "kvserve/core/status.h"

namespace kvserve {
namespace {

std::string check_message(auto&& fn) {
  try {
    fn();
  } catch (const CheckError& e) {
    return e.what();
  }
  return "";
}

TEST(Check, PassingChecksDoNothing) {
  EXPECT_NO_THROW(KV_CHECK(1 + 1 == 2));
  EXPECT_NO_THROW(KV_CHECK_EQ(3, 3));
  EXPECT_NO_THROW(KV_CHECK_LT(1, 2, "context {}", 7));
}

TEST(Check, FailureNamesFileLineExpressionAndContext) {
  const int line = __LINE__ + 1;
  const std::string msg = check_message([] { KV_CHECK(2 < 1, "row {} is bad", 42); });
  EXPECT_NE(msg.find("tests/unit/check_test.cpp:" + std::to_string(line)), std::string::npos)
      << msg;
  EXPECT_NE(msg.find("2 < 1"), std::string::npos) << msg;
  EXPECT_NE(msg.find("row 42 is bad"), std::string::npos) << msg;
}

TEST(Check, ComparisonFailurePrintsBothValues) {
  const int a = 5;
  const int b = 9;
  const std::string msg = check_message([&] { KV_CHECK_EQ(a, b); });
  EXPECT_NE(msg.find("a == b"), std::string::npos) << msg;
  EXPECT_NE(msg.find("5 vs 9"), std::string::npos) << msg;
  EXPECT_NE(check_message([&] { KV_CHECK_GE(a, b, "x"); }).find("a >= b"), std::string::npos);
}

TEST(Check, OperandsAreEvaluatedOnce) {
  int calls = 0;
  auto next = [&] { return ++calls; };
  KV_CHECK_EQ(next(), 1);
  EXPECT_EQ(calls, 1);
}

TEST(Status, OkAndErrors) {
  EXPECT_TRUE(Status::ok().is_ok());
  const Status s = out_of_memory("need {} slots, {} free", 10, 3);
  EXPECT_FALSE(s.is_ok());
  EXPECT_EQ(s.code(), StatusCode::kOutOfMemory);
  EXPECT_EQ(s.message(), "need 10 slots, 3 free");
  EXPECT_EQ(s.to_string(), "out of memory: need 10 slots, 3 free");
}

Result<int> parse_positive(int x) {
  if (x <= 0) return invalid_argument("{} is not positive", x);
  return x;
}

Status use_parse(int x, int* out) {
  KV_ASSIGN_OR_RETURN(*out, parse_positive(x));
  KV_RETURN_IF_ERROR(Status::ok());
  return Status::ok();
}

TEST(Result, ValueOrStatus) {
  const Result<int> good = parse_positive(4);
  ASSERT_TRUE(good.is_ok());
  EXPECT_EQ(*good, 4);
  EXPECT_TRUE(good.status().is_ok());
  const Result<int> bad = parse_positive(-1);
  EXPECT_FALSE(bad.is_ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THROW((void)bad.value(), CheckError);
  EXPECT_THROW(Result<int>(Status::ok()), CheckError);
}

TEST(Result, MacrosPropagate) {
  int out = 0;
  EXPECT_TRUE(use_parse(3, &out).is_ok());
  EXPECT_EQ(out, 3);
  const Status s = use_parse(0, &out);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(out, 3);
}

}  // namespace
}  // namespace kvserve
