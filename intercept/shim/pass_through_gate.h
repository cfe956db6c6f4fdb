// The gate before the daemon connection exists: every operation goes at once. Optionally counts
// what it saw, per category and per hook, and writes the counts at exit (GPUQOS_DEBUG_COUNTS).
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <string>

#include "gpuqos/intercept/gate.h"

namespace gpuqos::intercept {

class PassThroughGate final : public Gate {
 public:
  // `counts_path` empty: count nothing, write nothing.
  explicit PassThroughGate(std::string counts_path) : counts_path_(std::move(counts_path)) {}

  Ticket before(const Operation& op) noexcept override;
  void after(const Operation& op, Ticket ticket, CUresult result) noexcept override;
  void shutdown() noexcept override;

 private:
  using Counter = std::atomic<std::uint64_t>;
  const std::string counts_path_;
  std::array<Counter, kCategoryCount> by_category_{};
  std::array<Counter, kHookCount> by_hook_{};
  Counter captured_{0};
  Counter failed_{0};  // the driver returned an error
  std::atomic<bool> written_{false};
};

}  // namespace gpuqos::intercept
