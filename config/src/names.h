// The words the config file uses for each enum, in the enum's order.
#pragma once

#include <array>
#include <span>
#include <string_view>

namespace gpuqos::config::detail {

inline constexpr std::array<std::string_view, 6> kLogLevelNames{"trace", "debug", "info", "warn", "error", "off"};
inline constexpr std::array<std::string_view, 4> kPolicyNames{"none", "fifo", "priority", "baymax"};
inline constexpr std::array<std::string_view, 2> kPriorityNames{"low", "high"};

// The keys of each table, and the table as a file writes its header.
struct TableKeys {
  std::string_view header;
  std::span<const std::string_view> keys;
};
inline constexpr std::array<std::string_view, 5> kRootKeys{"daemon", "devices", "policy", "job", "access"};
inline constexpr std::array<std::string_view, 5> kDaemonKeys{"socket", "log_level", "metrics_listen", "profile_store",
                                                             "profile_save_interval_s"};
inline constexpr std::array<std::string_view, 2> kDevicesKeys{"ordinals", "uuids"};
inline constexpr std::array<std::string_view, 2> kAccessKeys{"high_priority_uids", "high_priority_gids"};
inline constexpr std::array<std::string_view, 6> kJobKeys{"name",   "allowed_priority", "target_ms", "percentile",
                                                          "weight", "safety_margin_ms"};
inline constexpr std::array<std::string_view, 3> kPolicyKeys{"name", "baymax", "fifo"};
inline constexpr std::array<std::string_view, 13> kBaymaxKeys{
    "safety_margin_ms",   "be_backlog_bound_ms", "max_be_transfers",     "copy_chunk_bytes", "adaptation",
    "min_backlog_bound_ms", "max_backlog_bound_ms", "adapt_step_ms",    "preemptive_device", "long_op_tail_share",
    "timeslice_ms",       "bound_by_slices",     "idle_bound_factor"};
inline constexpr std::array<std::string_view, 1> kFifoKeys{"max_outstanding"};
inline constexpr std::array<TableKeys, 7> kTables{{{"[daemon]", kDaemonKeys},
                                                   {"[devices]", kDevicesKeys},
                                                   {"[access]", kAccessKeys},
                                                   {"[[job]]", kJobKeys},
                                                   {"[policy]", kPolicyKeys},
                                                   {"[policy.baymax]", kBaymaxKeys},
                                                   {"[policy.fifo]", kFifoKeys}}};

}  // namespace gpuqos::config::detail
