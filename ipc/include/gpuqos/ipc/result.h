// Result<T> and Status: a value or the reason there is none (C++20 has no std::expected).
//
// Nothing in ipc/ throws to report a failure: functions return one of these, so the shim can
// fail open on any error without try/catch at the C boundary.
#pragma once

#include <optional>
#include <string>
#include <utility>

namespace gpuqos::ipc {

// The reason something failed; converts into any Result<T> or Status.
struct Error {
  std::string message;
};

template <class T>
class [[nodiscard]] Result {
 public:
  Result(T value) : value_(std::move(value)) {}  // NOLINT(google-explicit-constructor)
  Result(Error error) : error_(std::move(error.message)) {}  // NOLINT(google-explicit-constructor)

  bool ok() const noexcept { return value_.has_value(); }
  explicit operator bool() const noexcept { return ok(); }

  // Only when ok().
  T& value() & { return *value_; }
  const T& value() const& { return *value_; }
  T&& value() && { return std::move(*value_); }
  T* operator->() { return &*value_; }
  const T* operator->() const { return &*value_; }

  // Empty when ok().
  const std::string& error() const noexcept { return error_; }

 private:
  std::optional<T> value_;
  std::string error_;
};

// Success, or the reason for failure.
class [[nodiscard]] Status {
 public:
  Status() = default;  // success
  Status(Error error) : error_(std::move(error.message)), failed_(true) {}  // NOLINT

  static Status success() { return Status(); }
  bool ok() const noexcept { return !failed_; }
  explicit operator bool() const noexcept { return ok(); }
  const std::string& error() const noexcept { return error_; }

 private:
  std::string error_;
  bool failed_ = false;
};

}  // namespace gpuqos::ipc
