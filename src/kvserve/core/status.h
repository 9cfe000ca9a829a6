// Status and Result<T>: expected failures as values.
//
// Out of KV memory, a missing file or a bad argument are not bugs; functions that can meet them
// return Status (or Result<T>) and the caller decides. Bugs are CHECKs (check.h).
#pragma once

#include <fmt/format.h>

#include <string>
#include <string_view>
#include <utility>
#include <variant>

#include "kvserve/core/check.h"

namespace kvserve {

enum class StatusCode {
  kOk,
  kInvalidArgument,  // the caller passed something unusable (a bad flag, a malformed file)
  kNotFound,         // a file or name that does not exist
  kOutOfMemory,      // no KV slots / rows / device memory left: retry after freeing
  kUnavailable,      // a platform or feature not present in this build or on this machine
  kUnimplemented,    // a combination kvserve does not support (yet)
  kIoError,          // the operating system refused a read or write
  kInternal,         // a failure inside a library kvserve calls
};

std::string_view status_code_name(StatusCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status ok() { return {}; }

  bool is_ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }
  std::string to_string() const;

  // Marks a status as deliberately ignored.
  void ignore() const {}

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

template <typename... Args>
Status make_status(StatusCode code, fmt::format_string<Args...> f, Args&&... args) {
  return Status(code, fmt::format(f, std::forward<Args>(args)...));
}
template <typename... Args>
Status invalid_argument(fmt::format_string<Args...> f, Args&&... args) {
  return make_status(StatusCode::kInvalidArgument, f, std::forward<Args>(args)...);
}
template <typename... Args>
Status out_of_memory(fmt::format_string<Args...> f, Args&&... args) {
  return make_status(StatusCode::kOutOfMemory, f, std::forward<Args>(args)...);
}
template <typename... Args>
Status unavailable(fmt::format_string<Args...> f, Args&&... args) {
  return make_status(StatusCode::kUnavailable, f, std::forward<Args>(args)...);
}

// A value or the Status that explains why there is none.
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}        // NOLINT(google-explicit-constructor)
  Result(Status status) : v_(std::move(status)) {  // NOLINT(google-explicit-constructor)
    KV_CHECK(!std::get<Status>(v_).is_ok(), "a Result built from a Status must carry an error");
  }

  bool is_ok() const { return std::holds_alternative<T>(v_); }
  const Status& status() const {
    static const Status kOk;
    return is_ok() ? kOk : std::get<Status>(v_);
  }
  T& value() & {
    KV_CHECK(is_ok(), "value() of a failed Result: {}", std::get<Status>(v_).to_string());
    return std::get<T>(v_);
  }
  const T& value() const& {
    KV_CHECK(is_ok(), "value() of a failed Result: {}", std::get<Status>(v_).to_string());
    return std::get<T>(v_);
  }
  T&& value() && {
    KV_CHECK(is_ok(), "value() of a failed Result: {}", std::get<Status>(v_).to_string());
    return std::get<T>(std::move(v_));
  }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }

 private:
  std::variant<T, Status> v_;
};

}  // namespace kvserve

#define KV_STATUS_CONCAT_INNER_(a, b) a##b
#define KV_STATUS_CONCAT_(a, b) KV_STATUS_CONCAT_INNER_(a, b)

// Returns the Status from the enclosing function when `expr` is not ok.
#define KV_RETURN_IF_ERROR(expr)           \
  do {                                     \
    ::kvserve::Status kv_status_ = (expr); \
    if (!kv_status_.is_ok()) [[unlikely]]  \
      return kv_status_;                   \
  } while (0)

// `lhs` = the value of a Result, or return its Status from the enclosing function.
#define KV_ASSIGN_OR_RETURN(lhs, expr) \
  KV_ASSIGN_OR_RETURN_IMPL_(KV_STATUS_CONCAT_(kv_result_, __LINE__), lhs, expr)
#define KV_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                              \
  if (!tmp.is_ok()) [[unlikely]]                  \
    return tmp.status();                          \
  lhs = std::move(tmp).value()
