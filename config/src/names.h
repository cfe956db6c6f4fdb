// The words the config file uses for each enum, in the enum's order.
#pragma once

#include <array>
#include <string_view>

namespace gpuqos::config::detail {

inline constexpr std::array<std::string_view, 6> kLogLevelNames{"trace", "debug", "info", "warn", "error", "off"};
inline constexpr std::array<std::string_view, 4> kPolicyNames{"none", "fifo", "priority", "baymax"};
inline constexpr std::array<std::string_view, 2> kPriorityNames{"low", "high"};

}  // namespace gpuqos::config::detail
