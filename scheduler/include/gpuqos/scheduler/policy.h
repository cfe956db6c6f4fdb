// The policy interface: events in (op posted, op completed, client gone, tick), grants out.
//
// A policy is a pure object: no I/O, no clock, no threads. The daemon calls it from its one loop
// thread with the time of each event, so a test drives it in a virtual clock. Every descriptor it
// sees has already passed ipc's validate_op / validate_completion. The Baymax policy implements
// this same interface.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "gpuqos/ipc/descriptor.h"
#include "gpuqos/ipc/registration.h"
#include "gpuqos/scheduler/engine_backlog.h"
#include "gpuqos/scheduler/hold_reason.h"

namespace gpuqos::scheduler {

using ClientId = std::uint32_t;  // the daemon's client number, unique for its lifetime

// A decision: client may issue every op with seq <= through_seq. through_seq may lie beyond the
// client's last posted op: credit, spent by the shim without asking.
struct Grant {
  ClientId client = 0;
  std::uint64_t through_seq = 0;
  friend bool operator==(const Grant&, const Grant&) = default;
};
using Decisions = std::vector<Grant>;

// Who a client is, as far as scheduling cares: told once, before its first op.
struct ClientInfo {
  ClientId client = 0;
  std::string job;
  ipc::Priority priority = ipc::Priority::low;  // the effective class (after access checks)
  // The device it registered on, where a policy places it until its first GPU op names one.
  // kNoDevice: none (gpuqosd: a shim registers before it knows a device, and each process numbers
  // its own, device_table.h: such a client is on no device, and asks before its first op).
  static constexpr std::uint32_t kNoDevice = ~std::uint32_t{0};
  std::uint32_t device = 0;
  std::optional<std::int64_t> target_ns;  // the job's latency target (config), if any
  double percentile = 99.0;               // ... at this percentile
  double weight = 1.0;                    // share among best-effort jobs
  // baymax's safety margin for the job's queries (config [[job]] safety_margin_ms); none: the policy's
  std::optional<std::int64_t> safety_margin_ns;
};

struct OpPosted {
  ClientId client = 0;
  ipc::Priority priority = ipc::Priority::low;
  ipc::OpDescriptor op{};
  std::int64_t now_ns = 0;
  // The predictor's upper estimate of the op's device time; 0: no prediction (the policy falls
  // back to placeholder_duration_ns).
  std::int64_t predicted_ns = 0;
  // Its point prediction (0: none; the upper estimate stands in): what the op takes on average.
  std::int64_t expected_ns = 0;
  // The predictor knows nothing of this kernel: its estimate is every kernel's, a guess.
  bool guessed = false;
};

struct OpCompleted {
  ClientId client = 0;
  ipc::CompletionDescriptor completion{};  // device start/end times
  std::int64_t now_ns = 0;
  // The op's own device time on a device that runs work in order (DurationLearner::completed: from the
  // latest end within its span of the spans read before it, or its start, to its end); 0 when one ran
  // alongside it, or not known.
  std::int64_t own_ns = 0;
};

// [policy.baymax], in the daemon's units.
struct BaymaxOptions {
  std::int64_t safety_margin_ns = 1'000'000;
  std::int64_t be_backlog_bound_ns = 5'000'000;
  std::uint32_t max_be_transfers = 1;         // 0: no limit
  std::uint64_t copy_chunk_bytes = 4u << 20;  // 0: never split
  bool adaptation = false;
  std::int64_t min_backlog_bound_ns = 1'000'000;
  std::int64_t max_backlog_bound_ns = 20'000'000;
  std::int64_t adapt_step_ns = 500'000;
  // The devices that time-slice the kernels of different processes (a bit per ordinal, as
  // ipc::device_in; ipc::kAllDevices: every one). On the others (the Baymax premise) a best-effort
  // kernel longer than the bound blocks a query arriving behind it past the bound, and such kernels
  // are rationed to long_op_tail_share of the tail allowance (baymax_policy.h).
  std::uint64_t preemptive_devices = 0;
  double long_op_tail_share = 0.5;
  // On a preemptive device: how long a process's kernels keep the GPU once another process's are
  // ready (its time slice). A query's kernels then wait for at most one slice of each best-effort
  // job with work on the device, at each of its blocking points (baymax_policy.h).
  std::int64_t timeslice_ns = 2'000'000;
  std::map<std::uint32_t, std::int64_t> device_timeslice_ns;  // ... on these devices instead
  // The same settings by GPU UUID prefix (config::uuid_prefix). The policy never reads these:
  // gpuqosd moves them, with the ordinals', onto its own device numbers (daemon_config.h).
  std::vector<std::string> preemptive_uuids;
  std::map<std::string, std::int64_t> uuid_timeslice_ns;
  // On a preemptive device, once every job with a target there has a profile: bound best-effort work
  // by the slices a query arriving now would wait for, and let a best-effort job alone with work
  // queue past its streams' bound (baymax_policy.h). Off: each stream's backlog is bounded.
  bool bound_by_slices = false;
  // On a preemptive device: while no query of a job with a target there is open or waiting, each
  // best-effort stream's backlog may reach this many times the bound (a query arriving then waits
  // for a slice of each job with work, however deep its queue; the depth is how long the work takes
  // to drain once the query is there). 1: the bound always.
  double idle_bound_factor = 1.0;

  bool preemptive(std::uint32_t device) const noexcept { return ipc::device_in(preemptive_devices, device); }
  std::int64_t timeslice(std::uint32_t device) const {
    const auto it = device_timeslice_ns.find(device);
    return it == device_timeslice_ns.end() ? timeslice_ns : it->second;
  }
};

struct PolicyOptions {
  std::string name = "fifo";
  // fifo: low-priority ops granted but not yet completed (0: no limit).
  std::uint32_t max_outstanding_ops = 0;
  // Ops a low-priority client may issue ahead of the daemon's answer when nothing else waits
  // (0: one grant round trip per op).
  std::uint32_t credit_ops = 32;
  BaymaxOptions baymax;
};

// What a policy that predicts keeps beyond the engines' backlog, for status and metrics.
struct PolicyState {
  std::int64_t backlog_bound_ns = 0;   // the best-effort compute bound now (adaptation moves it)
  std::uint64_t adaptation_steps = 0;  // times adaptation moved it
  struct LongOpBudget {
    std::uint32_t device = 0;
    double level_ns = 0;  // what long best-effort ops may spend now (negative: in debt)
    double cap_ns = 0;    // the most it holds
  };
  std::vector<LongOpBudget> long_op_budgets;  // devices that ration long ops
  // Each best-effort job's granted compute work not completed yet (predicted ns, all its streams).
  std::map<std::string, std::int64_t> be_compute_outstanding_ns;
  // A best-effort stream's bound on a preemptive device while no query is in the system there
  // (idle_bound_factor x the bound now); 0 when the factor is 1 or no device is preemptive.
  std::int64_t idle_stream_bound_ns = 0;
  // A high-priority job whose target leaves too little over its expected query time for what a
  // query arriving while best-effort work runs waits for, whatever the policy holds from then on, so
  // such queries can miss the target. On a preemptive device: less than one time slice per
  // best-effort process there (contexts take turns). On a device that runs kernels to their end:
  // less than the best-effort backlog bound (granted before the query, it runs first) less the idle
  // part of the query's expected time before it first waits for the device (what drains in it costs
  // nothing; the query's own device work is not idle).
  // High-priority jobs with a query open for more than kOverdueTargets x their target: best-effort
  // work no longer waits for it (a begin mark without its end, or a job that never drains).
  static constexpr std::int64_t kOverdueTargets = 4;
  std::vector<std::string> overdue_jobs;
  struct TightTarget {
    std::string job;
    std::uint32_t device = 0;
    std::int64_t target_ns = 0;
    std::int64_t expected_query_ns = 0;  // its queries' own time (QueryTracker::own_query_ns)
    std::int64_t timeslice_ns = 0;       // a preemptive device's slice (0: the device runs kernels to their end)
    std::uint32_t be_processes = 1;  // best-effort clients that posted work there (at least 1: one may come)
    std::int64_t backlog_bound_ns = 0;  // a run-to-end device: the bound (0: a preemptive device)
    std::int64_t backlog_wait_ns = 0;   // and the wait it can cost a query
    // A run-to-end device: the longest query work of another high-priority process there, which
    // runs ahead of a query posted after it.
    std::int64_t ahead_ns = 0;
    friend bool operator==(const TightTarget&, const TightTarget&) = default;
  };
  std::vector<TightTarget> tight_targets;  // by job, then device
  // A high-priority job with a target that says its requests' arrivals (gpuqos_query_arrived), once
  // a query of it has closed: how often they arrive and how long past its own time best-effort work
  // may make each query run (the deadline test keeps the margin of it free). Several clients of a
  // job: the least allowance.
  struct MarkedJob {
    std::string job;
    std::int64_t mean_arrival_gap_ns = 0;  // 0: too few arrivals yet to say
    std::int64_t query_allowance_ns = 0;
    friend bool operator==(const MarkedJob&, const MarkedJob&) = default;
  };
  std::vector<MarkedJob> marked_jobs;  // by job
  // Per device: how long its compute engine had nothing granted in flight (by the policy's account)
  // while a best-effort compute op was held there, for whatever reason: the best-effort throughput
  // the holds cost outright. (A hold while other work runs on the device only reorders it.)
  struct IdleHeld {
    std::uint32_t device = 0;
    std::int64_t held_ns = 0;
    friend bool operator==(const IdleHeld&, const IdleHeld&) = default;
  };
  std::vector<IdleHeld> idle_held;  // by device
};

class Policy {
 public:
  virtual ~Policy() = default;

  virtual std::string_view name() const = 0;

  // A client registered; its ops follow. Policies that need nothing of it ignore it.
  virtual Decisions client_registered(const ClientInfo& /*info*/, std::int64_t /*now_ns*/) { return {}; }

  // A high-priority op is accounted and never held: no decision is ever needed for it.
  virtual Decisions op_posted(const OpPosted& event) = 0;
  virtual Decisions op_completed(const OpCompleted& event) = 0;
  // Everything of the client is forgotten; freed capacity may grant others.
  virtual Decisions client_gone(ClientId client, std::int64_t now_ns) = 0;
  virtual Decisions tick(std::int64_t now_ns) = 0;

  // What is on (or granted to) each device's engines, for status and for the policy itself.
  virtual const EngineBacklog& backlog() const = 0;

  // New parameters of the same policy (a config reload), applied in place. False when this policy
  // cannot take them without a restart (a different name); then nothing changed.
  virtual bool reconfigure(const PolicyOptions& /*options*/) { return false; }

  // How long best-effort heads were held, by reason, since the policy started (hold_reason.h);
  // none from a policy that does not say why it holds.
  virtual std::optional<HoldTimes> hold_times() const { return std::nullopt; }
  // The same by job name (empty from such a policy, and for jobs that never waited).
  virtual std::map<std::string, HoldTimes> hold_times_by_job() const { return {}; }
  // Its state at now_ns (none from a policy that keeps none beyond the backlog).
  virtual std::optional<PolicyState> state(std::int64_t /*now_ns*/) const { return std::nullopt; }
  // The op a waiting best-effort client is held at, as the policy priced it, and why (none when it
  // is not held, or from a policy that does not say why it holds).
  struct HeldHead {
    ipc::OpDescriptor op{};
    std::int64_t predicted_ns = 0;  // the upper estimate it is held by
    std::int64_t expected_ns = 0;   // the point prediction
    HoldReason reason = HoldReason::bound;
  };
  virtual std::optional<HeldHead> held_head(ClientId /*client*/) const { return std::nullopt; }
};

// Queues a low-priority op in arrival order, except that a mark (a synchronisation or query mark:
// no engine) right behind the same client's mark replaces it. Marks are posted without waiting (a
// thread looping on cuStreamSynchronize while another's launch is held) and take no engine: granting
// the later grants both, and queued one by one they grew gpuqosd by 250 MB per client (an audit:
// a million marks behind one held op). `Entry` has `op`; `same_client(back)` says whether the
// queue's last entry is the same client's (a queue of one client's entries: always).
template <class Queue, class Entry, class SameClient>
void push_coalescing_marks(Queue& queue, Entry entry, SameClient same_client) {
  if (!engine_of(entry.op) && !queue.empty() && !engine_of(queue.back().op) && same_client(queue.back())) {
    queue.back() = std::move(entry);
    return;
  }
  queue.push_back(std::move(entry));
}
// The same for a queue of every client's entries: `Entry` also has `client`.
template <class Entry, class Queue>
void push_coalescing_marks(Queue& queue, Entry entry) {
  const auto client = entry.client;
  push_coalescing_marks(queue, std::move(entry), [client](const Entry& back) { return back.client == client; });
}

// The policy called options.name, or nullptr when there is none by that name.
std::unique_ptr<Policy> make_policy(const PolicyOptions& options);

}  // namespace gpuqos::scheduler
