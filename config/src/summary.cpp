// render_summary: the loaded config as aligned "key  value" lines, for --check-config.
#include "gpuqos/config/summary.h"

#include <array>
#include <cstdint>
#include <sstream>

#include "values.h"

namespace gpuqos::config {
namespace {

using detail::format_number;

class Lines {
 public:
  void add(std::string_view key, std::string_view value, int indent = 2) {
    std::string left(static_cast<std::size_t>(indent), ' ');
    left.append(key);
    if (!value.empty() && left.size() < kValueColumn) left.resize(kValueColumn, ' ');
    out_ << left << (value.empty() ? "" : " ") << value << '\n';
  }
  void heading(std::string_view name, std::string_view value = {}) { add(name, value, 0); }
  std::string text() const { return out_.str(); }

 private:
  static constexpr std::size_t kValueColumn = 26;
  std::ostringstream out_;
};

std::string or_text(const std::string& value, const char* if_empty) { return value.empty() ? if_empty : value; }

std::string join(const auto& numbers) {
  std::string text;
  for (const auto number : numbers) text += (text.empty() ? "" : ", ") + std::to_string(number);
  return text;
}

// "4194304 (4 MiB)"; the unit only when the size is a whole number of it.
std::string describe_bytes(std::uint64_t bytes) {
  static constexpr std::array<const char*, 4> kUnits{"KiB", "MiB", "GiB", "TiB"};
  std::string text = std::to_string(bytes);
  for (std::size_t i = kUnits.size(); i-- > 0;) {
    const std::uint64_t unit = std::uint64_t{1} << (10 * (i + 1));
    if (bytes >= unit && bytes % unit == 0) return text + " (" + std::to_string(bytes / unit) + " " + kUnits[i] + ")";
  }
  return text;
}

void add_baymax(Lines& lines, const BaymaxConfig& baymax) {
  lines.add("safety_margin_ms", format_number(baymax.safety_margin_ms));
  lines.add("be_backlog_bound_ms", format_number(baymax.be_backlog_bound_ms));
  lines.add("max_be_transfers", baymax.max_be_transfers == 0 ? "no limit" : std::to_string(baymax.max_be_transfers));
  lines.add("copy_chunk_bytes", baymax.copy_chunk_bytes == 0 ? "no chunking" : describe_bytes(baymax.copy_chunk_bytes));
  const auto& listed = baymax.preemptive_ordinals;
  const bool some = baymax.preemptive_device || !listed.empty() || !baymax.preemptive_uuids.empty();
  if (baymax.preemptive_device) {
    lines.add("preemptive_device", "yes: long best-effort kernels not rationed");
  } else if (some) {
    std::string named = listed.empty() ? "" : (listed.size() == 1 ? "device " : "devices ") + join(listed);
    for (const std::string& uuid : baymax.preemptive_uuids) named += (named.empty() ? "GPU-" : ", GPU-") + uuid;
    lines.add("preemptive_device", named + ": long best-effort kernels not rationed there");
  } else {
    lines.add("preemptive_device", "no");
  }
  lines.add("long_op_tail_share", format_number(baymax.long_op_tail_share));
  if (some) {
    std::string devices;
    for (const auto& [device, ms] : baymax.device_timeslice_ms)
      devices += (devices.empty() ? "device " : ", device ") + std::to_string(device) + ": " + format_number(ms);
    for (const auto& [uuid, ms] : baymax.uuid_timeslice_ms)
      devices += (devices.empty() ? "GPU-" : ", GPU-") + uuid + ": " + format_number(ms);
    lines.add("timeslice_ms", format_number(baymax.timeslice_ms) + (devices.empty() ? "" : " (" + devices + ")"));
    lines.add("bound_by_slices", baymax.bound_by_slices ? "yes: a best-effort job alone queues freely" : "no");
    lines.add("idle_bound_factor", format_number(baymax.idle_bound_factor) +
                                       " (x the bound per stream while no query is in the system)");
  }
  if (!baymax.adaptation) {
    lines.add("adaptation", "off");
    return;
  }
  lines.add("adaptation", "on: " + format_number(baymax.min_backlog_bound_ms) + " to " +
                              format_number(baymax.max_backlog_bound_ms) + " ms, step " +
                              format_number(baymax.adapt_step_ms) + " ms");
}

// `baymax_margin_ms`: [policy.baymax] safety_margin_ms when the policy is baymax (it applies to the
// jobs that set none of their own), else null.
std::string describe(const JobConfig& job, const double* baymax_margin_ms) {
  // What the file sets but the daemon will not use is said, not left out: a typo'd pairing shows.
  const bool high = job.allowed_priority == Priority::high;
  std::string text = high ? "may run high" : "always low";
  if (job.target_ms && high) {
    text += ", target p" + format_number(job.percentile) + " <= " + format_number(*job.target_ms) + " ms";
  } else if (job.target_ms) {
    text += ", target_ms " + format_number(*job.target_ms) + " unused (the job always runs low)";
  } else {
    text += ", no latency target";
    if (job.percentile_set) {
      text += " (percentile " + format_number(job.percentile) + " unused without target_ms)";
    }
  }
  text += ", weight " + format_number(job.weight);
  if (job.safety_margin_ms) {
    text += ", safety margin " + format_number(*job.safety_margin_ms) + " ms";
    if (!high) {
      text += " unused (the job always runs low)";
    } else if (!job.target_ms) {
      text += " unused (no latency target to keep it for)";
    } else if (*job.safety_margin_ms >= *job.target_ms) {
      text += " (not under the target: best-effort work waits while any query of it is open)";
    }
  } else if (baymax_margin_ms && high && job.target_ms && *baymax_margin_ms >= *job.target_ms) {
    text += " ([policy.baymax] safety_margin_ms " + format_number(*baymax_margin_ms) +
            " is not under the target: best-effort work waits while any query of it is open)";
  }
  return text;
}

std::string describe(const AccessConfig& access) {
  if (access.anyone_may_run_high) return "anyone";
  std::string text = "root";
  if (!access.high_priority_uids.empty()) text += ", uids " + join(access.high_priority_uids);
  if (!access.high_priority_gids.empty()) text += ", gids " + join(access.high_priority_gids);
  return text;
}

}  // namespace

std::string managed_devices_text(const DevicesConfig& devices) {
  if (devices.ordinals.empty() && devices.uuids.empty()) return "every device";
  std::string text = devices.ordinals.empty() ? "" : (devices.ordinals.size() == 1 ? "device " : "devices ") + join(devices.ordinals);
  for (const std::string& uuid : devices.uuids) text += (text.empty() ? "GPU-" : ", GPU-") + uuid;
  return text;
}

std::string render_summary(const Config& config) {
  Lines lines;
  lines.heading("daemon");
  lines.add("socket", config.daemon.socket_path);
  lines.add("log_level", to_string(config.daemon.log_level));
  lines.add("metrics_listen", or_text(to_string(config.daemon.metrics_listen), "off"));
  lines.add("profile_store", or_text(config.daemon.profile_store, "none"));
  lines.add("profile_save_interval_s", format_number(config.daemon.profile_save_interval_s));
  const bool every = config.devices.ordinals.empty() && config.devices.uuids.empty();
  lines.heading("devices", every ? "all" : managed_devices_text(config.devices));
  lines.heading("policy", to_string(config.policy.name));
  if (config.policy.name == PolicyName::baymax) add_baymax(lines, config.policy.baymax);
  if (config.policy.name == PolicyName::fifo) {
    const auto limit = config.policy.fifo.max_outstanding;
    lines.add("max_outstanding", limit == 0 ? "no limit" : std::to_string(limit));
  }
  lines.heading("jobs", config.jobs.empty() ? "none listed" : std::to_string(config.jobs.size()));
  const double* baymax_margin_ms =
      config.policy.name == PolicyName::baymax ? &config.policy.baymax.safety_margin_ms : nullptr;
  for (const JobConfig& job : config.jobs) lines.add(job.name, describe(job, baymax_margin_ms));
  lines.heading("access");
  lines.add("high priority", describe(config.access));
  return lines.text();
}

}  // namespace gpuqos::config
