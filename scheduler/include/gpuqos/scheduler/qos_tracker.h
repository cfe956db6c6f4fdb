// The QoS tracker: per job, the latency distribution of its queries measured against its target,
// and the progress of its best-effort work; daemon-wide, how often best-effort work was held and
// for how long. It is what `gpuqos status`, `gpuqos top` and the metrics endpoint show.
//
// Pure: the daemon's loop feeds it events with their times (CLOCK_MONOTONIC ns) and reads
// snapshots; no clock, I/O or threads of its own. Jobs are keyed by name, so a job's numbers
// survive its clients reconnecting; at most kMaxJobs are kept (the one idle longest goes first,
// sparing jobs with connected clients, then jobs with measured queries).
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <limits>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <boost/icl/interval_set.hpp>

#include "gpuqos/config/config.h"
#include "gpuqos/ipc/descriptor.h"
#include "gpuqos/ipc/registration.h"
#include "gpuqos/scheduler/hold_reason.h"

namespace gpuqos::scheduler {

using ClientId = std::uint32_t;  // the daemon's client number (as in policy.h)

// Log-linear buckets of nanosecond values: exact below 32 ns, then 32 linear buckets per power of
// two, so a percentile is within 1/64 (1.6 %) of the exact one; values from 0 to about 137 s (2^37
// ns) are bucketed, larger ones share the top bucket (max_ns() stays exact). Storage grows with the
// largest value seen (about 5 KiB for latencies up to 10 ms, 8.5 KiB at most).
class LatencyHistogram {
 public:
  static constexpr int kSubBucketBits = 5;
  static constexpr int kMaxExponent = 36;  // values up to 2^37 - 1 ns have their own bucket
  static constexpr std::size_t kBucketCount =
      static_cast<std::size_t>(kMaxExponent - kSubBucketBits + 2) << kSubBucketBits;

  void record(std::int64_t value_ns);

  std::uint64_t count() const { return count_; }
  double sum_ns() const { return sum_ns_; }
  double mean_ns() const { return count_ == 0 ? 0.0 : sum_ns_ / static_cast<double>(count_); }
  std::int64_t min_ns() const { return min_ns_; }
  std::int64_t max_ns() const { return max_ns_; }
  // The value at percentile p in (0, 100] by nearest rank (the rank_for(p, count())-th smallest),
  // to within 1/64 of it; 0 when empty.
  std::int64_t percentile_ns(double percentile) const;

  // Nearest rank: the smallest rank r (1-based) with r >= p/100 * count; at least 1.
  static std::uint64_t rank_for(double percentile, std::uint64_t count);
  // Exact counts at fixed bounds, for a Prometheus histogram (which aggregates across daemons, and
  // takes `histogram_quantile`, where a summary's quantiles do not): values <= kLeBoundsNs[i].
  static constexpr std::array<std::int64_t, 16> kLeBoundsNs{
      100'000,     250'000,     500'000,     1'000'000,     2'500'000,     5'000'000,
      10'000'000,  25'000'000,  50'000'000,  100'000'000,   250'000'000,   500'000'000,
      1'000'000'000, 2'500'000'000, 5'000'000'000, 10'000'000'000};
  std::uint64_t count_at_most(std::size_t bound) const;  // cumulative, as a histogram's `le`

  static std::size_t bucket_of(std::int64_t value_ns);
  static std::int64_t bucket_low_ns(std::size_t bucket);   // smallest value in the bucket
  static std::int64_t bucket_high_ns(std::size_t bucket);  // largest value in the bucket

 private:
  std::vector<std::uint64_t> counts_;  // up to the highest bucket used
  std::array<std::uint64_t, kLeBoundsNs.size()> within_{};  // values in (bound i-1, bound i]
  std::uint64_t count_ = 0;
  double sum_ns_ = 0;
  std::int64_t min_ns_ = 0;
  std::int64_t max_ns_ = 0;
};

// Ops completed and time in flight over the last kWindowNs (a ring of kSlots slots): a
// best-effort job's current rate, next to its totals. Ops count in the slot of their completion,
// time in the slots it was spent in.
class ProgressWindow {
 public:
  static constexpr std::size_t kSlots = 10;
  static constexpr std::int64_t kSlotNs = 500'000'000;
  static constexpr std::int64_t kWindowNs = kSlotNs * static_cast<std::int64_t>(kSlots);

  void add_ops(std::int64_t now_ns, std::uint64_t ops);
  // [start_ns, end_ns) was in flight; the part older than the ring's slots is not kept.
  void add_time(std::int64_t start_ns, std::int64_t end_ns);

  struct Rate {
    double ops_per_s = 0;
    double busy_share = 0;  // time in flight / wall time (at most 1 for one job: CoveredTime)
  };
  // Over the window ending at now_ns, or since since_ns (the job first seen) when that is later.
  Rate rate(std::int64_t now_ns, std::int64_t since_ns) const;

 private:
  struct Slot {
    std::int64_t index = -1;  // time / kSlotNs of what it holds
    std::uint64_t ops = 0;
    std::int64_t device_ns = 0;
  };
  Slot* slot_for(std::int64_t index);  // nullptr: older than what the ring holds there
  std::array<Slot, kSlots> slots_{};
};

// The wall time a job had work in flight: the union of its ops' spans, so ops that overlap (on
// its streams, engines, processes or devices, or a batch of coarse completions sharing one
// interval) count once. Spans are kept kHorizonNs back from the daemon's clock (so an op in flight
// longer than that counts its last kHorizonNs) and at most
// kMaxIntervals apart (beyond, the oldest gap is filled in, uncounted): a client's spans are its
// word, and a flood of tiny ones must not grow the daemon. A span reaching further back counts
// from there.
class CoveredTime {
 public:
  static constexpr std::int64_t kHorizonNs = 60'000'000'000;
  static constexpr std::size_t kMaxIntervals = 1024;

  // Adds [start_ns, end_ns) at now_ns and returns the part of it no earlier span covered, each
  // piece of which (in order) goes to `piece` when given.
  std::int64_t add(std::int64_t start_ns, std::int64_t end_ns, std::int64_t now_ns,
                   const std::function<void(std::int64_t, std::int64_t)>& piece = {});
  std::size_t intervals() const { return spans_.iterative_size(); }

 private:
  boost::icl::interval_set<std::int64_t> spans_;
  std::int64_t forgotten_before_ns_ = std::numeric_limits<std::int64_t>::min();
};

// Which tight targets (PolicyState::tight_targets, checked once a second) to log: a (job, device)
// tight now and at kLogAfter of the last kChecks checks, this one included. Not at once: the first
// queries after gpuqosd starts are judged by an untrained predictor (a user test's log said "its
// queries' 3.493 ms" 1 s in, of queries that take 2.2 ms, and the status then listed nothing). Not
// at every check in a row either: a target that hovers at the threshold (tight at one check, not at
// the next) was then never logged, though the status listed it half the time.
class TightTargetWatch {
 public:
  using Key = std::pair<std::string, std::uint32_t>;  // job, device
  static constexpr int kChecks = 10;
  static constexpr int kLogAfter = 5;

  // The keys tight at this check, in any order; returns those to log (each may come again at later
  // checks: the caller tells each once).
  std::vector<Key> check(const std::vector<Key>& tight);

 private:
  std::map<Key, std::uint32_t> history_;  // bit k: tight k checks ago; a key with none is dropped
};

// Grants and held best-effort work, counted by each Client and summed for the daemon.
struct GrantCounters {
  std::uint64_t grants = 0;              // grant descriptors pushed to clients
  std::uint64_t ops_held = 0;            // GPU ops posted beyond the client's grant (they waited)
  std::int64_t held_wait_ns_total = 0;   // how long those waited, post to grant, once granted
  std::int64_t held_wait_ns_max = 0;
  std::optional<HoldTimes> held_ns_by_reason;  // the policy's account of why (daemon-wide; clients: none)
  GrantCounters& operator+=(const GrantCounters& other);
};

// What a job's query latencies run from, in the order a job can move through them (a job that
// begins to mark its queries, then to say its requests' arrivals). All end at the query's end: the
// synchronisation that drains it, or gpuqos_query_end() for a job that marks its queries.
enum class LatencyFrom : std::uint8_t {
  first_op,  // boundaries inferred: its first GPU op
  begin,     // gpuqos_query_begin()
  arrival,   // the request's arrival (gpuqos_query_arrived())
};
// "first_op", "begin" or "arrival": the status's `latency_from`.
const char* latency_from_name(LatencyFrom from);

// One job as status and metrics show it. Latencies in ns; 0 while it has no query.
struct JobQosSnapshot {
  std::string job;
  ipc::Priority priority = ipc::Priority::low;  // high while any connected process of it is
  std::uint32_t clients = 0;                    // connected now
  std::optional<std::int64_t> target_ns;        // the config's target now, if any
  double percentile = 99.0;                     // ... at this percentile
  double weight = 1.0;                          // the config's: its share among best-effort jobs
  std::uint64_t queries = 0;
  LatencyFrom latency_from = LatencyFrom::first_op;
  double latency_sum_ns = 0;
  std::int64_t mean_ns = 0, p50_ns = 0, p90_ns = 0, p99_ns = 0, p999_ns = 0, max_ns = 0;
  std::int64_t at_percentile_ns = 0;  // the latency at `percentile`: what the target is about
  // Queries at most LatencyHistogram::kLeBoundsNs[i] long (cumulative).
  std::array<std::uint64_t, LatencyHistogram::kLeBoundsNs.size()> at_most{};
  std::uint64_t violations = 0;       // queries longer than the target they were measured against
  double violation_fraction = 0;
  // Queries that never closed: open when their process left, or abandoned by gpuqosd (a query open
  // with nothing posted for kAbandonQueryNs, or waiting on a completion that never came). Not in the
  // latencies: their ends are not known. Not cleared when the latencies start over.
  std::uint64_t abandoned = 0;
  // At most n - rank(percentile) queries over the target (exact, where at_percentile_ns is a
  // bucket's middle); none without target or query.
  std::optional<bool> meets_target;
  std::uint64_t be_ops = 0;           // best-effort GPU ops completed (they ran)
  // The time they were in flight (CoveredTime: a job's overlapping spans count once), which on a
  // device other jobs share includes waiting behind their work (two jobs' shares can add up to
  // more than 1), not the device time they took.
  std::int64_t be_device_ns = 0;
  double be_ops_per_s = 0;            // over the last ProgressWindow::kWindowNs
  double be_busy_share = 0;
  std::optional<HoldTimes> be_held_ns_by_reason;  // the policy's account of its waits (hold_reason.h)
  std::optional<std::int64_t> be_outstanding_ns;  // the policy's: granted compute work not completed
  std::int64_t idle_ns = 0;           // since its latest event
};

class QosTracker {
 public:
  static constexpr std::size_t kMaxJobs = 256;

  // The client (of job `job`, running as `priority`) posted; the first call registers it.
  void client_seen(ClientId client, const std::string& job, ipc::Priority priority, std::int64_t now_ns);
  // The client posted a query_begin or query_arrived mark: it marks its queries, so while it is
  // connected its job's inferred queries (another process's) are left out (query_closed).
  void client_marks(ClientId client, std::int64_t now_ns);
  // The client is gone; its grant counters are kept in the daemon-wide total.
  void client_left(ClientId client, const GrantCounters& counters, std::int64_t now_ns);
  // A query of the client's job closed after latency_ns (measured from `from`); target_ns: the
  // job's target now. A job's latencies are of one kind and against one target: its first query
  // measured from a later point of the request's life (the job began to mark its queries, or to say
  // its arrivals), or under another target than the queries before (a reload changed it), starts its
  // histogram and violations over, so its percentile, violations and their fraction are of the same
  // queries. What that dropped is returned (dropped 0: nothing).
  struct StartedOver {
    std::uint64_t dropped = 0;                // queries left out
    bool target_changed = false;              // else: the job began to measure from `from`
    std::optional<std::int64_t> old_target_ns;  // the target they were measured against
    LatencyFrom from = LatencyFrom::first_op;  // what its latencies run from now
    // This query was inferred (from its first op) while the job's latencies run from its marks
    // (another process of the job, still connected, marks its queries): left out, not mixed in.
    bool left_out = false;
    // An inferred query of a job whose latencies ran from its marks, no process of it marking any
    // more (the one that did left): its latencies start over from first ops (`dropped`: the marked).
    bool back_to_first_op = false;
  };
  StartedOver query_closed(ClientId client, std::int64_t latency_ns, std::optional<std::int64_t> target_ns,
                           std::int64_t now_ns, LatencyFrom from = LatencyFrom::first_op);
  // `queries` queries of the client's job ended without closing (its process left, or gpuqosd gave
  // up on them). Not activity: the job's last-active time stays (a query given up on after a
  // minute of silence would make an idle job look busy).
  void query_abandoned(ClientId client, std::int64_t now_ns, std::uint64_t queries = 1);
  // A reload: each job whose target in `config` is not the one its latencies were measured against
  // starts over now (not at its next query, so the status never sets old violations against the new
  // target). What each dropped, by job.
  std::map<std::string, StartedOver> retarget(const config::Config& config);
  // The job's latency target in `config`, if it gives one.
  static std::optional<std::int64_t> target_of(const config::Config& config, const std::string& job);
  // A completion of a best-effort client's op, read at now_ns: its span (end at most now_ns) counts
  // where no other span of its job covered it already (coarse completions of one batch share one
  // interval).
  void work_completed(ClientId client, const ipc::CompletionDescriptor& completion, std::int64_t now_ns);

  // Every job: connected ones first (high priority, then by name), then idle ones: those the config
  // gives a target first, then latest first.
  // Targets and percentiles come from `config` as it is now.
  std::vector<JobQosSnapshot> snapshot(const config::Config& config, std::int64_t now_ns) const;
  // Counters of the clients that left (add the connected clients' own for the daemon's total).
  const GrantCounters& departed_counters() const { return departed_; }
  std::size_t job_count() const { return jobs_.size(); }

 private:
  struct Job {
    ipc::Priority priority = ipc::Priority::low;
    std::uint32_t clients = 0;
    std::int64_t first_seen_ns = 0;
    std::int64_t last_active_ns = 0;
    LatencyHistogram latency;
    std::uint64_t violations = 0;
    std::uint64_t abandoned = 0;
    LatencyFrom from = LatencyFrom::first_op;  // what its latencies run from
    std::optional<std::int64_t> measured_target_ns;  // the target its latencies were measured against
    std::uint64_t be_ops = 0;
    std::int64_t be_device_ns = 0;
    CoveredTime in_flight;
    ProgressWindow window;
  };
  struct ClientState {
    std::string job;
    ipc::Priority priority = ipc::Priority::low;
    bool marks = false;  // it posted a begin or arrived mark, or closed a marked query
  };
  enum class Activity { active, not_active };
  // The client's job (created again if it was dropped), marked active at now_ns unless said not to
  // be; nullptr for a client never seen.
  Job* job_of(ClientId client, std::int64_t now_ns, Activity activity = Activity::active);
  Job& add_job(const std::string& name, std::int64_t now_ns);
  // add_job for a job whose processes may be connected already (it was dropped): counts them.
  Job& restart_job(const std::string& name, std::int64_t now_ns);
  // Empties the job's histogram and violations; what they held.
  static StartedOver start_over(Job& job, bool target_changed);
  // Does a connected process of `job` mark its queries (clients_)? Asked only of an inferred query
  // of a job whose latencies run from marks: a scan, not a count to keep in step.
  bool any_client_marks(const std::string& job) const;
  // High if any connected process of `job` is (clients_), else low.
  ipc::Priority priority_of_job(const std::string& job) const;
  JobQosSnapshot snapshot_of(const std::string& name, const Job& job, const config::Config& config,
                             std::int64_t now_ns) const;

  std::map<std::string, Job> jobs_;
  std::map<ClientId, ClientState> clients_;
  GrantCounters departed_;
};

}  // namespace gpuqos::scheduler
