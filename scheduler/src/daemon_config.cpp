// options_from_config: the [daemon] and [policy] tables as DaemonOptions.
#include "gpuqos/scheduler/daemon_config.h"

namespace gpuqos::scheduler {

ipc::Result<DaemonOptions> options_from_config(const config::Config& config, DaemonOptions base) {
  const auto name = config.policy.name;
  if (name != config::PolicyName::fifo && name != config::PolicyName::priority) {
    return ipc::Error{"policy." + std::string("name = \"") + std::string(config::to_string(name)) +
                      "\": this gpuqosd implements only \"fifo\" and \"priority\" so far"};
  }
  base.socket_path = config.daemon.socket_path;
  base.policy.name = std::string(config::to_string(name));
  base.policy.max_outstanding_ops = config.policy.fifo.max_outstanding;
  base.learning.store_path = config.daemon.profile_store;
  base.learning.save_interval_ns = static_cast<std::int64_t>(config.daemon.profile_save_interval_s) * 1'000'000'000;
  return base;
}

}  // namespace gpuqos::scheduler
