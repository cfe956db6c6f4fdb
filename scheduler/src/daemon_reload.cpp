// gpuqosd: reloading the config file on SIGHUP, and the command-line options that survive it.
//
// A reload is all or nothing for what it can change: a file that does not load, or that this
// daemon cannot run, is logged and changes nothing. What needs a restart (the socket, the predictor's
// store, another policy) is warned about and kept as it runs.
#include <spdlog/spdlog.h>
#include <sys/un.h>

#include <algorithm>
#include <ctime>
#include <filesystem>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "gpuqos/config/load.h"
#include "gpuqos/config/summary.h"
#include "gpuqos/ipc/clock.h"
#include "gpuqos/scheduler/client_access.h"
#include "gpuqos/scheduler/daemon.h"
#include "gpuqos/scheduler/daemon_config.h"

namespace gpuqos::scheduler {
namespace {

// Processes named one by one when a reload would not let them run high priority, and connected jobs
// whose settings it changes; the rest counted.
constexpr std::size_t kMaxKeptHighLines = 8;

// ", device 1: 1000 us" for each device with a time slice of its own.
std::string device_timeslices_text(const BaymaxOptions& baymax) {
  std::string text;
  for (const auto& [device, ns] : baymax.device_timeslice_ns) text += fmt::format(", ordinal {}: {} us", device, ns / 1000);
  for (const auto& [uuid, ns] : baymax.uuid_timeslice_ns) text += fmt::format(", GPU-{}: {} us", uuid, ns / 1000);
  return text;
}

// The devices that time-slice, as the config names them: a mask of ordinals, and GPU UUIDs.
std::string preemptive_text(const BaymaxOptions& baymax) {
  std::string text = fmt::format("{:#x}", baymax.preemptive_devices);
  for (const std::string& uuid : baymax.preemptive_uuids) text += ", GPU-" + uuid;
  return text;
}

}  // namespace

void apply_command_line(DaemonOptions& options) {
  const CommandLineOverrides& given = options.command_line;
  if (given.socket_path) options.socket_path = *given.socket_path;
  if (given.policy_name) options.policy.name = *given.policy_name;
  if (given.max_outstanding_ops) options.policy.max_outstanding_ops = *given.max_outstanding_ops;
  if (given.credit_ops) options.policy.credit_ops = *given.credit_ops;
  if (given.store_path) options.learning.store_path = *given.store_path;
  if (given.save_interval_ns) options.learning.save_interval_ns = *given.save_interval_ns;
  if (given.log_level) options.log_level = *given.log_level;
  if (given.metrics_listen) options.config.daemon.metrics_listen = *given.metrics_listen;
  make_paths_absolute(options);
}

void make_paths_absolute(DaemonOptions& options) {
  // A relative path is gpuqosd's working directory's (/ under systemd): said in full in the log and
  // the status. Against the directory gpuqosd started in, read once, so that every reload makes the
  // same path of it whatever becomes of that directory since (removed, renamed).
  static const std::optional<std::filesystem::path> start_directory = []() -> std::optional<std::filesystem::path> {
    std::error_code error;
    std::filesystem::path here = std::filesystem::current_path(error);
    if (error) return std::nullopt;
    return here;
  }();
  const auto absolute = [](std::string& path, std::size_t max_bytes) {
    if (path.empty() || std::filesystem::path(path).is_absolute() || !start_directory) return;
    // Symbolic links resolved (a lexical "link/.." is not where the kernel goes), the rest normalized.
    std::error_code error;
    const std::filesystem::path full = std::filesystem::weakly_canonical(*start_directory / path, error);
    // A socket's absolute path may be longer than a socket address holds, where the relative one fit.
    if (!error && full.string().size() <= max_bytes) path = full.string();
  };
  absolute(options.socket_path, sizeof(sockaddr_un::sun_path) - 1);
  absolute(options.learning.store_path, std::string::npos);
}

void Daemon::reload_config() {
  status_changed();  // what a status made earlier showed changes
  const std::string path = options_.config_path;  // a copy: options_ is replaced below
  if (path.empty()) return spdlog::info("SIGHUP: gpuqosd runs without --config, there is no file to reload");
  auto loaded = config::load_config_file(path, {.for_gpuqosd = true});
  if (!loaded) return reload_failed(path, loaded.error(), loaded.problems());
  auto configured = options_from_config(loaded.value(), options_);
  if (!configured) return reload_failed(path, configured.error());
  DaemonOptions next = std::move(configured.value());
  next.log_level = std::string(config::to_string(loaded->daemon.log_level));
  apply_command_line(next);

  std::vector<std::string> kept;  // what the file changes that needs a restart (for the status)
  if (next.socket_path != options_.socket_path) {
    kept.push_back("the socket (" + next.socket_path + ")");
    spdlog::warn("reload of {}: the socket change to {} needs a restart; still serving {}", path, next.socket_path,
                 options_.socket_path);
    next.socket_path = options_.socket_path;
  }
  if (next.learning.store_path != options_.learning.store_path ||
      next.learning.save_interval_ns != options_.learning.save_interval_ns) {
    kept.push_back("the profile store");
    spdlog::warn("reload of {}: the profile store change needs a restart; still using {}", path,
                 options_.learning.store_path.empty() ? std::string("none")
                                                      : "'" + options_.learning.store_path + "'");
    next.learning = options_.learning;
  }
  PolicyOptions numbered = by_device_number(next.policy, devices_);
  if (policy_->reconfigure(numbered)) {
    numbered_policy_ = std::move(numbered);
  } else {
    kept.push_back(next.policy.name != policy_->name() ? "the policy (" + next.policy.name + ")"
                                                        : "the policy's parameters");
    if (next.policy.name != policy_->name()) {
      spdlog::warn("reload of {}: the policy change from {} to {} needs a restart; keeping {} as it runs", path,
                   policy_->name(), next.policy.name, policy_->name());
    } else {
      spdlog::warn("reload of {}: policy {} cannot take new parameters without a restart", path, policy_->name());
    }
    next.policy = options_.policy;
  }
  if (next.config.devices != options_.config.devices) {
    spdlog::warn("reload of {}: managing {} from now on; jobs registered before keep the devices they were told "
                 "at registration ({}) until they register again",
                 path, managed_devices_text(next.config.devices), managed_devices_text(options_.config.devices));
  }
  // A file emptied or cut short (a config manager writing it in place, a stray '>') loads: it only
  // drops what it lost. Say so louder than the summary does.
  if (next.config.jobs.empty() && !options_.config.jobs.empty()) {
    spdlog::warn("reload of {}: it names no [[job]], the running config named {}: every latency target and "
                 "best-effort weight is dropped (an empty or half-written file?)",
                 path, options_.config.jobs.size());
  }
  if (!next.config.daemon.metrics_listen.enabled() && options_.config.daemon.metrics_listen.enabled()) {
    spdlog::warn("reload of {}: the metrics endpoint at {} stops: the file's [daemon] metrics_listen is unset or "
                 "empty",
                 path, config::to_string(options_.config.daemon.metrics_listen));
  }
  if (next.config.daemon.metrics_listen != options_.config.daemon.metrics_listen) metrics_retry_ns_ = 0;  // at once
  // The connected jobs' targets before: one the new file drops (a [[job]] renamed by a typo) is said.
  // Any other change of a connected job's settings (its weight, percentile, margin) is said too: a
  // user test changed only a weight and the log said nothing of it.
  std::map<std::string, std::pair<ClientInfo, ClientInfo>> settings;  // by job: before, after
  for (const auto& [id, client] : clients_) {
    const ClientIdentity& who = client->identity();
    settings.try_emplace(who.job, client_info(options_.config, who), client_info(next.config, who));
  }
  options_ = std::move(next);  // jobs, access and devices: for registrations from now on
  std::size_t changed = 0;
  for (const auto& [job, infos] : settings) {
    const auto& [was, now] = infos;
    if (was.target_ns && !now.target_ns) {
      spdlog::warn("reload of {}: job '{}' is connected and had a latency target ({}); the new config gives it none, "
                   "so it is no longer held to one (its [[job]] removed or renamed?)",
                   path, job, describe_targets(was));
      continue;
    }
    const std::string said = describe_targets(now);
    if (said != describe_targets(was) && ++changed <= kMaxKeptHighLines) {
      spdlog::info("reload of {}: job '{}' (connected) now has {} (was {})", path, job, said, describe_targets(was));
    }
  }
  if (changed > kMaxKeptHighLines) {
    spdlog::info("reload of {}: and {} more connected jobs' settings changed", path, changed - kMaxKeptHighLines);
  }
  // A running process's priority is its registration's: its shim was told then, and a high one does
  // not wait for grants. One the new config would not let run high keeps it until it registers again,
  // which is said (a user test revoked it by reload and the log said nothing, status still "high").
  std::size_t kept_high = 0;
  for (const auto& [id, client] : clients_) {
    const ClientIdentity& who = client->identity();
    if (who.priority != ipc::Priority::high) continue;
    // The groups as registration took them: the socket's, from connect time (/proc/PID could be
    // unreadable, or another process's by now).
    const PriorityDecision now = decide_priority(options_.config, who.job, ipc::Priority::high, who.peer,
                                                 peer_groups(client->socket_fd(), who.peer.pid));
    if (now.effective == ipc::Priority::high) continue;
    if (++kept_high > kMaxKeptHighLines) continue;
    spdlog::warn("reload of {}: job '{}' pid {} uid {} runs high priority, which the new config would not give it "
                 "({}): it keeps high priority until it registers again (restart it to apply)",
                 path, who.job, who.peer.pid, who.peer.uid, now.why_lowered);
  }
  if (kept_high > kMaxKeptHighLines) {
    spdlog::warn("reload of {}: and {} more processes keep high priority that the new config would not give them",
                 path, kept_high - kMaxKeptHighLines);
  }
  std::string needs_restart;
  for (const std::string& what : kept) needs_restart += (needs_restart.empty() ? "" : ", ") + what;
  for (const auto& [job, over] : qos_.retarget(options_.config)) {
    log_target_changed(job, QosTracker::target_of(options_.config, job), over);
  }
  config_status_ = ConfigStatus{path, static_cast<std::int64_t>(std::time(nullptr)), true,
                                static_cast<std::int64_t>(std::time(nullptr)), "", needs_restart};
  settings_checked_.clear();   // settings that differ now are said again
  spdlog::set_level(spdlog::level::from_str(options_.log_level));
  const BaymaxOptions& baymax = options_.policy.baymax;
  spdlog::info("config reloaded from {} (policy {}, max_outstanding_ops {}, credit_ops {}, baymax margin {} us, "
               "bound {} us, adaptation {}, max_be_transfers {}, copy_chunk_bytes {}, preemptive_devices {}, "
               "timeslice {} us{}, bound_by_slices {}, idle_bound_factor {}, long_op_tail_share {}, {} jobs, "
               "log level {})",
               path, policy_->name(), options_.policy.max_outstanding_ops, options_.policy.credit_ops,
               baymax.safety_margin_ns / 1000, baymax.be_backlog_bound_ns / 1000, baymax.adaptation ? "on" : "off",
               baymax.max_be_transfers, baymax.copy_chunk_bytes, preemptive_text(baymax),
               baymax.timeslice_ns / 1000, device_timeslices_text(baymax), baymax.bound_by_slices,
               baymax.idle_bound_factor, baymax.long_op_tail_share, options_.config.jobs.size(), options_.log_level);
  reregister_clients_with_policy(ipc::monotonic_ns());
}

void Daemon::reload_failed(const std::string& path, const std::string& error, std::size_t total) {
  // One problem per line (a log line each, each with its time and level, for whatever parses them).
  std::vector<std::string> problems;
  for (std::size_t at = 0; at <= error.size();) {
    const std::size_t end = std::min(error.find('\n', at), error.size());
    if (end > at) problems.push_back(error.substr(at, end - at));
    at = end + 1;
  }
  // More problems than lines: config listed the first ones and counted the rest in a last line.
  const bool capped = total > problems.size();
  if (capped) problems.pop_back();
  total = std::max(total, problems.size());
  if (total <= 1) {
    spdlog::error("reload of {} failed, keeping the running config: {}", path, error);
  } else {
    // At most kLoggedProblems lines: a megabyte of the wrong file logged 110,000 (gpuqosd
    // --check-config prints them, up to config's own cap).
    constexpr std::size_t kLoggedProblems = 100;
    spdlog::error("reload of {} failed, keeping the running config: {} problems:", path, total);
    for (std::size_t i = 0; i < problems.size() && i < kLoggedProblems; ++i) spdlog::error("  {}", problems[i]);
    if (total > kLoggedProblems) {
      spdlog::error("  ... and {} more (gpuqosd --check-config {} lists {})", total - kLoggedProblems, path,
                    capped ? fmt::format("the first {}", problems.size()) : std::string("them all"));
    }
  }
  config_status_.last_reload_ok = false;
  config_status_.last_reload_unix_s = static_cast<std::int64_t>(std::time(nullptr));
  // Kept short for the status (one control record): the first problems, and how many more.
  constexpr std::size_t kKeptProblems = 8, kKeptProblemBytes = 300;
  std::string kept;
  for (std::size_t i = 0; i < problems.size() && i < kKeptProblems; ++i) {
    kept += (i == 0 ? "" : "\n") + problems[i].substr(0, kKeptProblemBytes);
  }
  if (total > kKeptProblems) kept += fmt::format("\n... and {} more", total - std::min(problems.size(), kKeptProblems));
  config_status_.last_reload_error = kept;
}

// The policy hears each connected client's targets and weight again, as the new config has them.
// Their effective priorities are not revisited: a client keeps the class it registered with (the
// shim was told it then) until it registers again.
void Daemon::reregister_clients_with_policy(std::int64_t now_ns) {
  std::set<std::string> told;
  for (const auto& [id, client] : clients_) {
    const ClientInfo info = client_info(options_.config, client->identity());
    spdlog::debug("{}: {}", client->tag(), describe_targets(info));
    if (!told.contains(client->identity().job) && warn_if_target_unprotected(client->identity(), info)) {
      told.insert(client->identity().job);  // once a job
    }
    apply(policy_->client_registered(info, now_ns));
  }
}

}  // namespace gpuqos::scheduler
