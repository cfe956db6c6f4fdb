// options_from_config: the [daemon] and [policy] tables as DaemonOptions.
#include "gpuqos/scheduler/daemon_config.h"

namespace gpuqos::scheduler {
namespace {

// preemptive_device as a device mask: true is every device, a list its ordinals.
std::uint64_t preemptive_devices(const config::BaymaxConfig& baymax) {
  if (baymax.preemptive_device) return ipc::kAllDevices;
  std::uint64_t mask = 0;
  for (const std::uint32_t ordinal : baymax.preemptive_ordinals) {
    if (ordinal < ipc::kMaxDevices) mask |= std::uint64_t{1} << ordinal;  // the config allows 0-63
  }
  return mask;
}

}  // namespace

ipc::Result<DaemonOptions> options_from_config(const config::Config& config, DaemonOptions base) {
  const auto name = config.policy.name;
  if (name == config::PolicyName::none) {
    return ipc::Error{"policy.name = \"none\" means running without gpuqosd (stop the daemon instead)"};
  }
  base.socket_path = config.daemon.socket_path;
  base.policy.name = std::string(config::to_string(name));
  base.policy.max_outstanding_ops = config.policy.fifo.max_outstanding;
  const config::BaymaxConfig& b = config.policy.baymax;
  const auto ns = [](double ms) { return static_cast<std::int64_t>(ms * 1e6); };
  base.policy.baymax = BaymaxOptions{ns(b.safety_margin_ms), ns(b.be_backlog_bound_ms),   b.max_be_transfers,
                                     b.copy_chunk_bytes,      b.adaptation,                ns(b.min_backlog_bound_ms),
                                     ns(b.max_backlog_bound_ms), ns(b.adapt_step_ms),
                                     preemptive_devices(b), b.long_op_tail_share,         ns(b.timeslice_ms),
                                     b.bound_by_slices};
  base.config = config;
  base.learning.store_path = config.daemon.profile_store;
  base.learning.save_interval_ns = static_cast<std::int64_t>(config.daemon.profile_save_interval_s) * 1'000'000'000;
  return base;
}

}  // namespace gpuqos::scheduler
