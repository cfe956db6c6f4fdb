// Result<T>: a loaded value, or every problem found while loading it.
//
// config/ is a leaf (it depends on nothing else of gpuqos), so it has its own small Result with the
// same shape as ipc's: ok(), value(), error().
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace gpuqos::config {

// The problems that stop a load, one message each ("file:line:column: key: what is wrong").
struct Errors {
  std::vector<std::string> messages;
};

template <class T>
class [[nodiscard]] Result {
 public:
  Result(T value) : value_(std::move(value)) {}                   // NOLINT(google-explicit-constructor)
  Result(Errors errors) : errors_(std::move(errors.messages)) {}  // NOLINT(google-explicit-constructor)

  bool ok() const noexcept { return value_.has_value(); }
  explicit operator bool() const noexcept { return ok(); }

  // Only when ok().
  T& value() & { return *value_; }
  const T& value() const& { return *value_; }
  T&& value() && { return std::move(*value_); }
  T* operator->() { return &*value_; }
  const T* operator->() const { return &*value_; }

  // Every problem, in file order; empty when ok().
  const std::vector<std::string>& errors() const noexcept { return errors_; }
  // errors() joined by newlines (no trailing newline); empty when ok().
  std::string error() const {
    std::string joined;
    for (const auto& message : errors_) joined += (joined.empty() ? "" : "\n") + message;
    return joined;
  }

 private:
  std::optional<T> value_;
  std::vector<std::string> errors_;
};

}  // namespace gpuqos::config
