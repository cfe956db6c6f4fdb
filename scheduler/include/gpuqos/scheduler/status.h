// `gpuqos status`: what the daemon reports (DaemonStatus), its JSON form (bounded to one control
// record), the human-readable table, and the client side of the request.
//
// JSON (version 2; version 1 had no "jobs", "jobs_omitted" nor "grants"):
//   {"version":2, "daemon":{"pid","uptime_ns","policy","socket",
//              "config" (only with --config):{"path","loaded_unix_s","last_reload_ok",
//                        "last_reload_unix_s" (0: none yet),"last_reload_error" ("" when ok),
//                        "needs_restart" (what the running file changes that a reload cannot: "" none)},
//              "metrics" (only with an endpoint asked for or serving):{"listen","serving" (null: none),
//                        "error" (why "listen" is not served; null when it is),"retry_s"}},
//    "backlog":[{"device","engine" ("compute","h2d","d2h","local"),"outstanding_ops","backlog_ns",
//                "completed_ops","completed_device_ns"}],
//    "devices":[{"device","uuid","ordinal","clients","preemptive","timeslice_ns" (preemptive only)}],
//                (gpuqosd's device numbers: device_table.h)
//    "clients":[{"client","pid","uid","gid","job","priority","claimed_priority","device","state","segment",
//                "ops":{"posted","granted","completed"},"last_seq","granted_through_seq",
//                "current_wait_ns","kernel_names",
//                "unscheduled_devices" (only when it runs some: [{"ordinal","uuid" ("": not said)}])}],
//    "clients_omitted": N,   (only when the list had to be cut to fit one record)
//    "jobs":[{"job","priority","clients","target_ms" (null: none),"percentile","queries",
//             "latency_from" ("first_op", "begin" or "arrival": what its latencies run from),"mean_ms",
//             "p50_ms","p90_ms","p99_ms","p999_ms","max_ms","percentile_ms" (at "percentile"),
//             "violations","violation_fraction","meets_target" (null: no target or no query yet),
//             "idle_s","be":{"ops","device_ms","ops_per_s","busy_share",
//                            "held_ns_by_reason" (only from a policy that says; as in "grants")}}],
//    "jobs_omitted": N,      (the same, for jobs; the list that takes more room is cut first)
//    "grants":{"issued","ops_held","held_wait_ns_total","held_wait_ns_max",
//              "held_ns_by_reason":{"bound","transfer","deadline","budget","behind","share"}},
//    "policy_state" (only from a policy that keeps one):{"backlog_bound_ns",
//                    "idle_stream_bound_ns" (0: none),"adaptation_steps",
//                    "idle_held":[{"device","held_ns"}] (compute idle while best-effort compute held),
//                    "long_op_budget":[{"device","level_ns","cap_ns"}],
//                    "tight_targets":[...],"marked_jobs":[...],"overdue_jobs":[job names]},
//    "truncated": why (only when even the cut status did not fit: then only "daemon" holds anything)}
// and in such a policy's best-effort jobs' "be": "outstanding_ns" (granted compute work not completed,
// predicted). A status too long for one record is cut: entries come off the end of whichever list
// takes most room (clients, jobs, backlog, devices, and policy_state's lists), each counted in
// "<list>_omitted" beside it ("clients_omitted", "policy_state"."tight_targets_omitted", ...).
// Jobs (status_jobs.cpp) are what the daemon has seen work from, by name, kept across reconnects:
// latencies are of the high-priority queries since the daemon started; "be" counts the completions of
// its best-effort clients (ops_per_s and busy_share over the last 5 s).
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <functional>
#include <limits>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "gpuqos/ipc/registration.h"
#include "gpuqos/ipc/result.h"
#include "gpuqos/scheduler/engine_backlog.h"
#include "gpuqos/scheduler/policy.h"
#include "gpuqos/scheduler/qos_tracker.h"

namespace gpuqos::scheduler {

// The op a waiting best-effort client is held at (Policy::held_head), described for people.
struct HeldOpStatus {
  std::uint64_t seq = 0;
  std::string op;  // "kernel NAME", "copy h2d 4194304 bytes", ...
  std::int64_t predicted_ns = 0;
  std::int64_t expected_ns = 0;
  std::string held_by;  // a hold_reason.h name
  std::uint32_t device = 0;  // gpuqosd's number of the GPU it waits for
};

struct ClientStatus {
  std::uint32_t client = 0;
  std::int64_t pid = 0;
  std::uint32_t uid = 0;
  std::uint32_t gid = 0;
  std::string job;
  ipc::Priority priority = ipc::Priority::low;
  // Its Hello's device: 0 from every shim (it does not know one yet), and that process's own
  // ordinal besides; `devices` says where its work is, in gpuqosd's numbers.
  std::uint32_t device = 0;
  std::string state;
  std::string segment;
  std::uint64_t posted = 0;
  std::uint64_t granted = 0;
  std::uint64_t completed = 0;
  std::array<std::uint64_t, 4> marks{};  // synchronisations, query begins, query ends, arrivals
  std::uint64_t last_seq = 0;
  std::uint64_t granted_through_seq = 0;
  std::int64_t current_wait_ns = 0;
  std::uint64_t kernel_names = 0;
  // "priority" is the class the client runs as; this is what its Hello claimed (higher when the
  // config's access rules lowered it).
  ipc::Priority claimed_priority = ipc::Priority::low;
  std::optional<HeldOpStatus> held;
  std::vector<std::uint32_t> devices;  // the devices its posted GPU work is on (gpuqosd's numbers), in order
  // The devices it runs unscheduled ([devices] does not name them; a 1.9 shim says so), by its
  // ordinal, with their UUIDs ("GPU-...", empty when its driver cannot say).
  struct Unscheduled {
    std::uint32_t ordinal = 0;
    std::string uuid;
  };
  std::vector<Unscheduled> unscheduled;
};

// A GPU gpuqosd has seen work on (device_table.h): its number in status and logs, and which it is.
struct DeviceStatus {
  std::uint32_t device = 0;
  std::string uuid;              // "GPU-..."
  std::uint32_t ordinal = 0;     // as the first job that used it calls it (its settings' ordinal)
  std::uint64_t clients = 0;     // connected clients that posted work on it
  // Its [policy.baymax] settings as gpuqosd applies them (by UUID, else its ordinal's): does it
  // time-slice processes' kernels, and the slice.
  bool preemptive = false;
  std::int64_t timeslice_ns = 0;
};

struct PredictorStatus {
  std::string store;  // empty: none
  std::uint64_t kernels = 0;
  std::uint64_t learned = 0, coarse = 0, shared = 0, unknown = 0, rejected = 0, saves = 0;
};

// The config file gpuqosd runs (none without --config), and its latest SIGHUP reload.
struct ConfigStatus {
  std::string path;
  std::int64_t loaded_unix_s = 0;       // when the config running was read (start, or the last good reload)
  bool last_reload_ok = true;           // no reload yet counts as ok
  std::int64_t last_reload_unix_s = 0;  // 0: none yet
  std::string last_reload_error;        // why the latest reload was refused ("" when it was not)
  std::string needs_restart;            // applied, but not these ("the policy (fifo)", ...; "" when all was)
};

// The Prometheus endpoint, when one is asked for or serves ([daemon] metrics_listen): a user test
// found that only the log said whether it served or was retrying a port in use.
struct MetricsStatus {
  std::string listen;   // the address asked for ("" when a reload turned it off and one still serves)
  std::string serving;  // the address served ("" when none)
  std::string error;    // why `listen` is not served ("" when it is)
  std::int64_t retry_s = 0;  // how often it is tried again
};

struct DaemonStatus {
  std::int64_t pid = 0;
  std::int64_t uptime_ns = 0;
  std::string policy;
  std::string socket;
  std::vector<EngineLoad> backlog;
  std::vector<DeviceStatus> devices;  // by number; only GPUs whose ops said their UUID
  std::vector<ClientStatus> clients;
  PredictorStatus predictor;
  std::vector<JobQosSnapshot> jobs;  // QosTracker::snapshot's order
  GrantCounters grants;              // daemon-wide, departed clients included
  std::optional<PolicyState> policy_state;  // from a policy that keeps one (baymax)
  std::optional<ConfigStatus> config;  // with --config
  std::optional<MetricsStatus> metrics;  // with an endpoint asked for or serving
};

nlohmann::json to_json(const DaemonStatus& status);

// The JSON text, at most max_bytes (at least 1 KiB): entries are left off the end of its lists
// (counted in "<list>_omitted"), from whichever list is longest, until it fits; when even that does
// not fit, only the daemon's line and "truncated" (a request always gets a valid answer).
std::string bounded_status_text(const DaemonStatus& status, std::size_t max_bytes = ipc::kMaxControlTextBytes);

// The table `gpuqos status` prints (and `gpuqos top` refreshes). Throws nlohmann::json::exception
// on an answer it cannot read (a field missing, of another type, or out of range).
std::string render_status_table(const nlohmann::json& status);
// An integer field of the daemon's answer (`name` says which, for the message) as T: an integer in
// [min, T's max], or a float that is exactly one (an answer is any JSON); anything else throws
// nlohmann::json::type_error. Every integer the tables read goes through it: nlohmann's own get<T>
// converts a float with a cast, undefined behaviour for one out of T's range (a review's 1e300).
// Defined for std::int64_t, std::uint64_t and std::uint32_t.
template <class T>
T json_integer(const nlohmann::json& value, std::string_view name, T min = std::numeric_limits<T>::lowest());
// The same for object[key], `absent` when the object has no such key (an older daemon's answer).
template <class T>
T json_integer_or(const nlohmann::json& object, const char* key, T absent);
// Its lines about the policy's state: the bound, the long-op budgets, each best-effort job's granted
// work not completed, a warning per tight target (status must have "policy_state").
std::string render_policy_state(const nlohmann::json& status);
// What `gpuqos status` and gpuqosd's log say of a PolicyState::TightTarget.
std::string tight_target_text(const PolicyState::TightTarget& tight);

// status_jobs.cpp: the "jobs" entries and the "grants" object of the JSON, and their part of the
// table (query latencies against targets, best-effort progress, held work).
nlohmann::json job_json(const JobQosSnapshot& job);
nlohmann::json grants_json(const GrantCounters& grants);
std::string render_jobs_table(const nlohmann::json& status);
// The tables' JOB column: 24 characters, or the longest "job" of `rows` (names run to 63), so the
// columns after it stay aligned.
int job_column_width(const nlohmann::json& rows);

// Asks the daemon on socket_path for its status; the JSON text, or why not. With `quit_fd` (a
// signalfd, say) readable before the answer comes, it asks `quits` (which reads what came; none:
// anything quits), and on true stops waiting.
ipc::Result<std::string> request_status(const std::string& socket_path, int quit_fd = -1,
                                        const std::function<bool()>& quits = {});
// request_status's error for a user: one that could not connect with " (socket PATH; is gpuqosd
// running?)" unless it already says what is at the path (ipc::connect_failure does); any other
// (gpuqosd connected and did not answer, or refused) as it is.
std::string status_error_text(const std::string& error, const std::string& socket_path);
// Whether request_status's error is a daemon that is there but does not answer (stopped, or its loop
// stalled): no answer in time, or its queue of new connections full.
bool status_error_is_stall(const std::string& error);

}  // namespace gpuqos::scheduler
