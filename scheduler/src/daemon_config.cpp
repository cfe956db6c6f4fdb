// options_from_config: the [daemon] and [policy] tables as DaemonOptions.
#include "gpuqos/scheduler/daemon_config.h"

#include <filesystem>
#include <map>
#include <optional>
#include <string>

#include "gpuqos/ipc/registration.h"

namespace gpuqos::scheduler {

ipc::Result<DaemonOptions> options_from_config(const config::Config& config, DaemonOptions base) {
  const auto name = config.policy.name;
  if (name == config::PolicyName::none) {
    const std::string& place = config.policy.name_place;
    return ipc::Error{(place.empty() ? "" : place + ": ") +
                      "policy.name: \"none\" means running without gpuqosd (stop the daemon instead)"};
  }
  base.socket_path = config.daemon.socket_path;
  base.policy.name = std::string(config::to_string(name));
  base.policy.max_outstanding_ops = config.policy.fifo.max_outstanding;
  const config::BaymaxConfig& b = config.policy.baymax;
  const auto ns = [](double ms) { return static_cast<std::int64_t>(ms * 1e6); };
  std::map<std::uint32_t, std::int64_t> device_timeslices;
  for (const auto& [device, ms] : b.device_timeslice_ms) device_timeslices.emplace(device, ns(ms));
  std::map<std::string, std::int64_t> uuid_timeslices;
  for (const auto& [uuid, ms] : b.uuid_timeslice_ms) uuid_timeslices.emplace(uuid, ns(ms));
  base.policy.baymax = BaymaxOptions{
      .safety_margin_ns = ns(b.safety_margin_ms),
      .be_backlog_bound_ns = ns(b.be_backlog_bound_ms),
      .max_be_transfers = b.max_be_transfers,
      .copy_chunk_bytes = b.copy_chunk_bytes,
      .adaptation = b.adaptation,
      .min_backlog_bound_ns = ns(b.min_backlog_bound_ms),
      .max_backlog_bound_ns = ns(b.max_backlog_bound_ms),
      .adapt_step_ns = ns(b.adapt_step_ms),
      .preemptive_devices = b.preemptive_device ? ipc::kAllDevices : ipc::device_mask(b.preemptive_ordinals),
      .long_op_tail_share = b.long_op_tail_share,
      .timeslice_ns = ns(b.timeslice_ms),
      .device_timeslice_ns = std::move(device_timeslices),
      .preemptive_uuids = b.preemptive_uuids,
      .uuid_timeslice_ns = std::move(uuid_timeslices),
      .bound_by_slices = b.bound_by_slices,
      .idle_bound_factor = b.idle_bound_factor,
  };
  base.config = config;
  base.learning.store_path = config.daemon.profile_store;
  base.learning.save_interval_ns = static_cast<std::int64_t>(config.daemon.profile_save_interval_s * 1e9);
  return base;
}

namespace {

// The GPU's settings by UUID, when the config names it so: preemptive (true: listed), and its slice.
struct UuidSettings {
  bool preemptive = false;
  std::optional<std::int64_t> timeslice_ns;
};
UuidSettings uuid_settings(const BaymaxOptions& options, const std::optional<DeviceTable::Uuid>& uuid) {
  UuidSettings out;
  if (!uuid) return out;
  const std::string hex = ipc::uuid_hex(*uuid);
  for (const std::string& prefix : options.preemptive_uuids) out.preemptive = out.preemptive || hex.starts_with(prefix);
  std::size_t longest = 0;  // the most specific key that names it
  for (const auto& [prefix, ns] : options.uuid_timeslice_ns) {
    if (hex.starts_with(prefix) && prefix.size() > longest) {
      longest = prefix.size();
      out.timeslice_ns = ns;
    }
  }
  return out;
}

struct Settings {
  bool preemptive = false;
  std::int64_t timeslice_ns = 0;
  friend bool operator==(const Settings&, const Settings&) = default;
};
Settings settings_as(const BaymaxOptions& options, const UuidSettings& by_uuid, std::uint32_t ordinal) {
  return {by_uuid.preemptive || options.preemptive(ordinal), by_uuid.timeslice_ns.value_or(options.timeslice(ordinal))};
}

}  // namespace

PolicyOptions by_device_number(const PolicyOptions& options, const DeviceTable& devices) {
  const BaymaxOptions& in = options.baymax;
  const bool by_uuid = !in.preemptive_uuids.empty() || !in.uuid_timeslice_ns.empty();
  if (!devices.renumbered() && !by_uuid) return options;
  PolicyOptions numbered = options;
  BaymaxOptions& baymax = numbered.baymax;
  baymax.device_timeslice_ns.clear();
  if (baymax.preemptive_devices != ipc::kAllDevices) baymax.preemptive_devices = 0;
  for (std::uint32_t number = 0; number < ipc::kMaxDevices; ++number) {
    const UuidSettings named = uuid_settings(in, devices.uuid_of(number));
    const std::uint32_t ordinal = devices.config_ordinal(number);
    if (named.preemptive || in.preemptive(ordinal)) baymax.preemptive_devices |= std::uint64_t{1} << number;
    if (named.timeslice_ns) {
      baymax.device_timeslice_ns.emplace(number, *named.timeslice_ns);
    } else if (const auto it = in.device_timeslice_ns.find(ordinal); it != in.device_timeslice_ns.end()) {
      baymax.device_timeslice_ns.emplace(number, it->second);
    }
  }
  return numbered;
}

bool device_settings_differ(const BaymaxOptions& options, const DeviceTable::Uuid& uuid, std::uint32_t a,
                            std::uint32_t b) {
  const UuidSettings named = uuid_settings(options, uuid);
  return settings_as(options, named, a) != settings_as(options, named, b);
}

std::string config_path_to_keep(const std::string& given) {
  std::error_code error;
  const std::filesystem::path full = std::filesystem::absolute(given, error);
  return error ? given : full.string();
}

}  // namespace gpuqos::scheduler
