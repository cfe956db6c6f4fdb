// The daemon's configuration as typed, validated structs, with the defaults an empty file gets.
//
// Loading is in load.h. Every field below has a default, so default_config() is a working setup:
// all devices, policy baymax, no jobs listed, anyone may run high priority.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace gpuqos::config {

enum class LogLevel { trace, debug, info, warn, error, off };
enum class PolicyName { none, fifo, priority, baymax };
enum class Priority { low, high };

inline constexpr const char* kDefaultSocketPath = "/run/gpuqos/gpuqosd.sock";

// A TCP address to listen on; port 0 means off. host is without IPv6 brackets ("::1").
struct ListenAddress {
  std::string host;
  std::uint16_t port = 0;
  bool enabled() const noexcept { return port != 0; }
  friend bool operator==(const ListenAddress&, const ListenAddress&) = default;
};

// [daemon]
struct DaemonConfig {
  std::string socket_path = kDefaultSocketPath;  // socket: where clients register (<= 107 bytes)
  LogLevel log_level = LogLevel::info;           // log_level
  ListenAddress metrics_listen;                  // metrics_listen = "host:port"; "" (default): off
  std::string profile_store;                     // profile_store: the predictor's store file; "": none
  double profile_save_interval_s = 300;          // profile_save_interval_s: 0 = only at exit (seconds, as --profile-save-interval)
  friend bool operator==(const DaemonConfig&, const DaemonConfig&) = default;
};

// [devices]
// [devices] uuids lists at most this many GPUs (the registration reply carries them: ipc's
// kMaxManagedUuids).
inline constexpr std::size_t kMaxDeviceUuids = 16;

struct DevicesConfig {
  std::vector<std::uint32_t> ordinals;  // ordinals: devices managed, unique, in file order; empty: all
  // uuids: GPUs managed by UUID (uuid_prefix(): lowercase, no "GPU-"), besides the ordinals; both
  // empty: every device
  std::vector<std::string> uuids;
  friend bool operator==(const DevicesConfig&, const DevicesConfig&) = default;
};

// The largest idle_bound_factor a config may give (the policy holds to it too): with every _ms key
// at most an hour, 1000 x 3.6e12 ns stays exact in a double and far inside int64.
inline constexpr double kMaxIdleBoundFactor = 1000;

// [policy.baymax]
struct BaymaxConfig {
  double safety_margin_ms = 1.0;              // slack kept before open queries' deadlines (>= 0; [[job]] may override)
  double be_backlog_bound_ms = 5.0;           // cap on granted best-effort compute backlog (> 0)
  std::uint32_t max_be_transfers = 1;         // best-effort copies in flight at once; 0 = no limit
  std::uint64_t copy_chunk_bytes = 4u << 20;  // best-effort copies split into chunks this big; 0 = never
  bool adaptation = false;                    // move be_backlog_bound_ms with the measured tail latency
  double min_backlog_bound_ms = 1.0;          // adaptation never goes below this (> 0)
  double max_backlog_bound_ms = 20.0;         // ... nor above this (>= min_backlog_bound_ms)
  double adapt_step_ms = 0.5;                 // one adaptation step (> 0)
  bool preemptive_device = false;             // every GPU time-slices kernels of different processes
  std::vector<std::uint32_t> preemptive_ordinals;  // or only these (preemptive_device = [ordinals])
  // ... and the GPUs whose UUID starts with one of these (uuid_prefix(): lowercase, no "GPU-")
  std::vector<std::string> preemptive_uuids;
  double long_op_tail_share = 0.5;            // share of the tail allowance long ops may cost (0, 1]
  double timeslice_ms = 2.0;                  // a preemptive GPU's time slice per process (>= 0.001),
  std::map<std::uint32_t, double> device_timeslice_ms;  // on the devices not here (ordinal: their ms)
  std::map<std::string, double> uuid_timeslice_ms;      // by GPU UUID prefix, over the ordinals' (ms)
  bool bound_by_slices = false;               // preemptive GPU: bound what a query arriving now waits
  double idle_bound_factor = 1.0;             // preemptive GPU: a stream's bound x this with no query there
  friend bool operator==(const BaymaxConfig&, const BaymaxConfig&) = default;
};

// A GPU named by its UUID, as nvidia-smi -L and CUDA_VISIBLE_DEVICES write it ("GPU-5053021f-f19c-..."
// or a prefix of it; "MIG-..." for a MIG instance): the hex digits and dashes after "GPU-"/"MIG-",
// lowercase, at least one; nothing when `text` is no such name.
std::optional<std::string> uuid_prefix(std::string_view text);

// [policy.fifo]
struct FifoConfig {
  std::uint32_t max_outstanding = 0;  // best-effort ops granted and not yet completed; 0 = no limit
  friend bool operator==(const FifoConfig&, const FifoConfig&) = default;
};

// [policy]
struct PolicyConfig {
  PolicyName name = PolicyName::baymax;  // name
  BaymaxConfig baymax;                   // kept whatever the name, so switching is one line
  FifoConfig fifo;
  // Where `name` was set ("file:line:column"), empty when it was not: a consumer that refuses a
  // valid name (gpuqosd and "none") points at the line as the loader does. Not part of the value:
  // two configs that say the same are equal wherever they say it.
  std::string name_place;
  friend bool operator==(const PolicyConfig& a, const PolicyConfig& b) {
    return a.name == b.name && a.baymax == b.baymax && a.fifo == b.fifo;
  }
};

inline constexpr double kDefaultPercentile = 99.0;

// [[job]]: one job, by the name it registers with
struct JobConfig {
  std::string name;                            // 1-63 of A-Z a-z 0-9 . _ - (as GPUQOS_JOB)
  Priority allowed_priority = Priority::high;  // the highest class it may claim; low: always low
  std::optional<double> target_ms;             // latency target (> 0); none: not tracked against one
  double percentile = kDefaultPercentile;      // the target holds at this percentile, [50, 100)
  double weight = 1.0;                         // share among best-effort jobs (> 0)
  // baymax's safety margin for this job's queries (>= 0); none: [policy.baymax] safety_margin_ms
  std::optional<double> safety_margin_ms;
  bool percentile_set = false;  // the file names a percentile (the summary says one set without a target)
  friend bool operator==(const JobConfig&, const JobConfig&) = default;
};

// [access]: who may run high priority. With neither list in the file, anyone may (a single-user
// machine); listing either (even empty) restricts it to root, the uids listed and members of the gids
// listed. A high-priority claim from anyone else is the daemon's to refuse (it runs as low).
struct AccessConfig {
  bool anyone_may_run_high = true;
  std::vector<uid_t> high_priority_uids;  // high_priority_uids
  std::vector<gid_t> high_priority_gids;  // high_priority_gids: primary or supplementary group
  friend bool operator==(const AccessConfig&, const AccessConfig&) = default;
};

struct Config {
  DaemonConfig daemon;
  DevicesConfig devices;
  PolicyConfig policy;
  std::vector<JobConfig> jobs;  // [[job]], in file order, names unique
  AccessConfig access;
  friend bool operator==(const Config&, const Config&) = default;
};

// What an empty file loads as.
Config default_config();

// The job called `name`, or nullptr when the config does not list it.
const JobConfig* find_job(const Config& config, std::string_view name) noexcept;

// " (did you mean \"bert-infer\"?)" when a listed job's name is within a small edit distance of
// `name`, else "": for a job that registers under a name the config does not list.
std::string did_you_mean_job(const Config& config, std::string_view name);

// May a process with these credentials run at high priority? Root always may. Pure.
bool may_run_high(const Config& config, uid_t uid, gid_t gid, std::span<const gid_t> supplementary_gids) noexcept;

// The names used in the file ("info", "baymax", "high"); "127.0.0.1:9400", "[::1]:9400" or "".
std::string_view to_string(LogLevel level) noexcept;
std::string_view to_string(PolicyName name) noexcept;
std::string_view to_string(Priority priority) noexcept;
std::string to_string(const ListenAddress& address);

// "host:port" (host: IPv4, [IPv6] or a DNS name; port 1-65535) as metrics_listen takes it, for a
// command line that overrides it: nullopt with `out` set, or why the text is not one.
std::optional<std::string> parse_listen(std::string_view text, ListenAddress& out);

}  // namespace gpuqos::config
