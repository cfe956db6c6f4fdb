// Result<T>: a loaded value, or every problem found while loading it.
//
// config/ is a leaf (it depends on nothing else of gpuqos), so it has its own small Result with the
// same shape as ipc's: ok(), value(), error().
#pragma once

#include <algorithm>
#include <cstddef>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace gpuqos::config {

// The problems that stop a load, one message each ("file:line:column: key: what is wrong").
struct Errors {
  std::vector<std::string> messages;
  // How many problems there were: more than messages when they were capped (the last message then
  // counts the rest); 0: one per message.
  std::size_t total = 0;
};

template <class T>
class [[nodiscard]] Result {
 public:
  Result(T value) : value_(std::move(value)) {}                   // NOLINT(google-explicit-constructor)
  Result(Errors errors)  // NOLINT(google-explicit-constructor)
      : errors_(std::move(errors.messages)), problems_(std::max(errors.total, errors_.size())) {}

  bool ok() const noexcept { return value_.has_value(); }
  explicit operator bool() const noexcept { return ok(); }

  // Only when ok().
  T& value() & { return *value_; }
  const T& value() const& { return *value_; }
  T&& value() && { return std::move(*value_); }
  T* operator->() { return &*value_; }
  const T* operator->() const { return &*value_; }

  // The problems, in file order (the first Diagnostics::kMaxMessages, then a line counting the
  // rest); empty when ok().
  const std::vector<std::string>& errors() const noexcept { return errors_; }
  // How many problems there were in all (0 when ok()).
  std::size_t problems() const noexcept { return problems_; }
  // errors() joined by newlines (no trailing newline); empty when ok().
  std::string error() const {
    std::string joined;
    for (const auto& message : errors_) joined += (joined.empty() ? "" : "\n") + message;
    return joined;
  }

 private:
  std::optional<T> value_;
  std::vector<std::string> errors_;
  std::size_t problems_ = 0;
};

}  // namespace gpuqos::config
