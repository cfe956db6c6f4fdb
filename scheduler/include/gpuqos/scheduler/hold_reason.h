// Why best-effort work waited for its grant, as the policy saw it: the time each reason held the
// head op of a waiting best-effort client, by job and summed over all (baymax says; other policies
// report nothing). Shown by `gpuqos status` and the metrics endpoint, so an operator can tell what a
// slow best-effort job is waiting for.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string_view>

namespace gpuqos::scheduler {

enum class HoldReason : std::uint8_t {
  bound,     // the compute backlog bound (a query arriving later would wait too long)
  transfer,  // the best-effort transfer limit, or high-priority work on its copy engine (a copy, a memset)
  deadline,  // an open query's deadline
  budget,    // the long-op budget of a device that does not preempt kernels
  behind,    // another client's held head closed the engine (or reserved the budget)
  share,     // its job is ahead of its weight's share of the device beside another best-effort job's work
};
inline constexpr std::size_t kHoldReasons = 6;
inline constexpr std::array<std::string_view, kHoldReasons> kHoldReasonNames{"bound",  "transfer", "deadline",
                                                                             "budget", "behind",   "share"};

using HoldTimes = std::array<std::int64_t, kHoldReasons>;  // ns, by HoldReason

}  // namespace gpuqos::scheduler
