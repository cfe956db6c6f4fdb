// baymax: best-effort work is granted only when it cannot make a high-priority query miss its
// deadline (Baymax, ASPLOS '16, behind gpuqos's policy interface).
//
// State, per device and engine (compute, h2d, d2h, local): the predicted time at which the
// best-effort work already granted will be done (`be_until`), pushed out by each grant (by the predictor's
// upper estimate of the op) and pulled back by each completion (its end, plus what is still
// outstanding). High-priority ops are never held; they are accounted per client (their predicted
// device time) and their queries are tracked by QueryTracker (inferred from sync marks or marked
// explicitly). A query's deadline is its opening time (its request's arrival, when the job says
// when that was) plus its job's target.
//
// The decision for the head op of a best-effort client, on engine e of device d, predicted p:
// - compute (kernels, graphs): if best-effort work is already
//   outstanding, backlog(e) + p must stay within the bound (a query arriving later waits at most
//   that long; on a device that runs kernels to their end the other high-priority clients' posted
//   compute work, the most of it a client with a target would find, counts in the backlog too);
//   a lone op is let through whatever its length, or a long kernel would never run,
//   but on a device that does not preempt kernels it is rationed (the long-op budget, below). On a
//   device that time-slices processes' kernels (preemptive_device), a query arriving later waits for
//   its slice, not behind every job's backlog: the bound is then each best-effort job's own, per
//   stream (its outstanding compute work there + p; a process's streams share its slice), and a job
//   at its bound does not close the device to the others. While no query of a job with a target on
//   the device is open or waiting, that per-stream bound is idle_bound_factor x the bound (a query
//   arriving then waits for a slice of each job with work however deep the queues). With bound_by_slices, once every job
//   with a target on the device has a profile, the bound there is also on what a query of such a
//   job arriving now would wait: the slice sum below, with a whole query's blocking points and time
//   to its first one, within the bound and within one job's slices (blocks x timeslice), unless
//   the grant does not raise it or, without it, best-effort work there would delay such a query by
//   nothing (so one op always goes: none would be stuck for ever); a head held by it closes
//   the device's compute engine to the jobs behind it; and a best-effort job alone with work on the
//   device (no other one with work or waiting for some) is then free of its streams' bound;
// - copies: at most max_be_transfers best-effort copies between host and device in flight on the
//   device, and none while a high-priority copy is in flight in the same direction;
// - device-local work (memsets, copies within device memory: engine local, which runs beside the
//   kernels and their time slices): none while a high-priority op is in flight there, and backlog(e)
//   + p within the bound once best-effort work is outstanding there; it is neither its job's compute
//   work nor a transfer;
// - every open query on d with a target, in earliest-deadline-first order, must still make it:
//   now + need_k + max(0, backlog(e) + p - unblocked_k) + margin <= deadline_k, where need_k is
//   the query's expected remaining time (QueryTracker's profile) plus the predicted outstanding
//   device work of the queries ahead of it in deadline order (they are served first; on a device
//   that runs kernels to their end, every other high-priority client's posted compute work, which
//   runs before the query's next ops whatever the deadlines), and
//   unblocked_k the expected time until its program next waits for the device: best-effort work
//   drained by then does not delay it, what is left does (0 without a profile: all of it does).
//   A request the job said arrived (query_arrived) and has not begun counts as a query too, due at
//   its arrival plus the target: it starts when the job's queries before it are done, so its need
//   is theirs plus a whole query's expected time, and what delays them delays it as much. A job
//   that says its arrivals (and has a profile) also has, while a request of it is open or waiting,
//   a request arriving now checked, due at now plus the target, behind all of those: best-effort
//   work granted now delays every request that arrives before the job's queue drains, and the one
//   arriving now the most (later ones have later deadlines and wait for the same queue). Without it
//   an open query could be made to wait until its own deadline and a request arriving just behind
//   it missed.
//   Such a job's open query is also due by its start plus the profile's whole-query time plus the
//   bound (the adaptive one; at least the margin) if that is sooner, so best-effort work may delay
//   it by the bound less the margin, which the deadline test keeps for estimates' errors: delaying
//   each query up to a deadline that counts its wait in the job's queue grows that queue, and
//   every request behind it pays again. That allowance is also kept to what lets the job, at its
//   measured arrival rate (the mean gap g of its latest arrivals), stay busy at most kMaxQueryLoad
//   of the time with each query that much longer: kMaxQueryLoad x g - whole-query time, at least the
//   margin (query_allowance_ns).
//   On a preemptive device the compute delay is not backlog + p but the slices best-effort jobs
//   take: at each of the query's blocking points still to come (the profile's count; for a waiting
//   request, also those of the queries ahead of it) its kernels wait at most one time slice
//   (BaymaxOptions::timeslice of the device) of each best-effort job with work there, and a job delays it by no more than the
//   work it has left; until the next one the jobs with work take turns in the query's idle time. So
//   each job delays it by min(blocks x slice, its work (with p if it is this op's job) - idle / jobs
//   with work); with no profile yet, blocks is unbounded: all of the work counts. A grant that does
//   not raise that sum (its job fills a slice at every blocking point anyway) is not held: holding
//   it would not make the query faster;
// Sync and query marks occupy nothing and pass as soon as everything before them did.
//
// Among best-effort clients, grants go by weight (start-time fair queueing of compute work, and of
// transfers apart, per
// device: each grant advances the client's virtual time there by p / weight, p the point
// prediction; the least advanced client with a grantable head goes first). That orders grants, but
// it splits the device only when the jobs wait for the same room: jobs that each get what they post
// (a time-slicing device's per-stream bound, or jobs whose launches return between ops) would
// share the device as it serves them, whatever their weights. So a compute op of a client whose
// virtual time is more than bound / weight ahead of that of a best-effort client of another job of a
// different weight using the device (compute work in flight there, not far past its prediction: uses_device) waits
// (share) until that one catches up or its work there drains: a job runs about one bound of its
// own device time ahead of its share while another job is using the device, and never holds the
// device idle for it. Jobs of equal weight are not held for each other: a time-slicing device gives
// them about equal turns already, and holding one for the other cost the latency-critical job's
// tail in the benchmark. No head waits for its share longer than kShareHoldNs. A job's own processes
// do not hold each other (ranks of a job wait for each other on the device); processes of
// different jobs that wait for each other on the device (a collective across jobs, another job's
// event) are let go once the op waited for runs past its prediction. Transfers (host to device and
// back) have a virtual time of their own, per device, which orders transfer heads: the transfer
// limit's slots go by weight (no share hold). Credited ops count towards the share, and a job ahead
// of another that posted compute work lately gets no credit, so its next op asks.
//
// A head held by its engine's state (bound, transfer limit, bound_by_slices' slices) closes that engine to the clients behind it, so a long op is not starved by short ones; a head held only by a query's
// deadline does not, so another client's shorter op may use the query's slack, until it has been
// held kDeadlineHoldNs: then it closes the engine too, or back-to-back queries, each opening before
// the others' short ops drained, would hold it for ever. Closed so, the engine still takes the
// others' ops that drain before the queries in the system are expected to be done (the long op can
// go only when none is, and finds the engine empty then): closed outright, a job whose queries
// never left the system idle kept every best-effort job off the device (a review). With no high-priority client on a device, best-effort clients also get credit (seqs
// beyond their last posted op, as in fifo), so they pay no round trip when there is nothing to
// protect. What it holds when a high-priority job comes goes unasked, so the best-effort clients
// that may hold credit on a device share the bound (on a device that runs kernels to their end,
// what it has left over the work in flight and the others' unspent credit): each its part in ops
// of its longest recent one (at least one, at most credit_ops). None while a high-priority client
// is on no device yet (before its first GPU op), which may be this one; none while another client
// waits for a grant on the device; none for kGuessedMemoryOps ops after a guessed kernel.
//
// The long-op budget. On a device that runs a kernel to its end once started (preemptive_device =
// false, the Baymax premise), a best-effort op of length p > bound blocks a query that arrives
// while it runs for up to p: every query arriving in its first p - bound is blocked past the bound,
// which is the wait a query can absorb. With arrivals independent of best-effort work (Poisson or
// any stationary process), the share of queries so delayed is the sum of (p - bound) over the long
// ops run, divided by the wall time, whatever the query rate. So long ops spend a budget: an op is
// long when its point prediction (OpPosted::expected_ns) is over the bound, and then costs p - bound
// with p its upper estimate, the bound being the configured one (adaptation tightening it does not
// make more ops long), and the
// budget grows by long_op_tail_share x (1 - percentile / 100) per ns of wall time
// (the strictest high-priority job with a target on the device), up to kTailWindowNs of growth; it
// starts empty when the device first has such a job (a burst at start would count against few queries).
// With p99 and share 0.5, long ops may delay at most 0.5 % of queries past the bound: 5 ms of cost
// per second. The bound is what a query can absorb when its target counts from its first op. A job
// that says its arrivals (its target counts from each) absorbs more: a long op starts with none of
// its requests in the system, so one arriving x into it finishes about p - x + whole later (whole:
// its expected query), and the k arriving before it in the op queue ahead of it, k x whole more.
// Once its query profile and arrival rate are known, an op costs it the part in which an arrival
// would miss the target less the margin: (p + whole + margin - target) / (1 - load), load = whole /
// mean arrival gap (at most kLongOpMaxLoad), nothing when negative, for a request that would not
// have waited otherwise. One that would have waited w in the job's own queue has w less slack, so
// the window is the mean of (p + w + whole + margin - target) / (1 - load) over the waits the job's
// latest arrivals made by themselves (QueryTracker::queue_waits: every query its whole time, no
// best-effort work), each at least 0, and 0 for a request that would have waited more than the slack
// (it misses whatever the op does); the bound's price when every one would have. (Benchmark, fifo
// device, load 0.6: with w = 0, recsys's
// 97-ms kernel fitted the slack and cost nothing, and in runs where it started just before the
// seed's largest burst, which the LC alone queues for up to 92 ms, the p99 went to 1.19-1.25 x.)
// That window holds m = window /
// gap requests in expectation, all of whom miss together: the op is priced at m + 2 sqrt(m) of them
// (kLongOpCountSigmas; window + 2 sqrt(window x gap) of time), or 3 m when m < 1 (the square root
// would price a rare arrival as a likely one), so that one op meeting a burst is not what the tail
// allowance is spent on (benchmark, fifo device, end-to-end targets, load 0.2: a 97-ms kernel
// priced at its mean met 7 requests where 1.3 were expected, 9 of 471 over, p99 1.41 x). A job
// with no rate yet, or no slack, pays the bound's price, a mean count: knowing the rate can cost
// an op more. The op costs the most over the jobs with a target on the device. (Benchmark, fifo
// device, end-to-end targets, load 0.6: with every wait taken as 0, recsys's 97-ms kernel fitted the
// slack and recsys ran at 70-76 % of its standalone rate, against 8 % with service targets, with
// the p99 over in 4 of 6 runs; counting the waits, 16 %, the p99 at 0.67-0.70 x; blocking_cost_ns.)
// A long op waiting for budget does not close its engine (other jobs' short ops go on);
// once the budget covers it (or is full, for an op costing more than the cap), it goes as any lone
// long op does, but only while no query of such a job is open or waiting (a deadline hold): the
// budget prices the queries that arrive while the op runs, and one already there would wait for
// all of it, with everything queued behind it. After kLongOpWaitNs of that it goes by the deadline
// test alone, or a job whose queries never leave the system would starve it. The first long op held for budget on a device (in
// fair-queueing order) reserves it: the long ops of other clients wait behind it, or cheaper ones
// could spend the budget for ever.
// Long by the point prediction, not the upper estimate: the upper estimate of a short kernel can be
// 4x its prediction (DurationLearner::kMaxUpperRatio), so ordinary kernels passed for long ops, were
// rationed, and queued behind another job's long op waiting for budget (a ResNet-50 kernel of
// about 3 ms at an upper 22 ms: in the benchmark's fifo resnet+recsys cell ResNet-50 made 58-73 %
// of its standalone rate in 7 of 14 runs, against 85-88 %). Priced by the upper estimate: by the
// point prediction, recsys's 97-ms kernel cost 77 ms instead of about 120 and ran more often, and the
// cell's p99 reached 0.99 x the target (1.77 x in a run beside a build), against 0.67-0.75. The price: an op whose durations at one shape are
// bimodal (usually short, sometimes far over the bound) is predicted short (the models answer a
// geometric mean or a median) and is not held for budget. So an op not priced as long that ran over
// the threshold by its own measured time (OpCompleted::own_ns: from the latest end within its span
// of the ops read before it, or its start) is charged what it ran over at its completion: it blocked the queries arriving
// meanwhile as a long op would have, and the long ops after it wait for that debt. A coarse span, or
// one that another ran alongside, charges nothing. Only the spans read before it are seen, so the
// wait for another client's op read after it is taken for its own (as the learner takes it) and
// charged; so is a wait on its own host (a stream wait on a flag, before it on its stream).
// Debt is floored at minus the cap, so one mispredicted op cannot stop long ops for days. Credit
// (given while no high-priority job was on the device) spent on a long op is charged all the same.
// When the rate changes (a job with a target comes or goes, a reload) the budget is settled at the
// old rate first; when the device has no such job left it is dropped, so it starts empty again.
// No high-priority job with a target on the device, or a preemptive device: no budget.
//
// Adaptation (optional): the bound follows the measured tail latency of each job (adaptive_bound.h).
// Stale state: an open query older than kStaleQueryNs is abandoned and an op whose completion never
// came is retired after kStaleOpNs, so a lost report cannot starve best-effort work forever; a
// best-effort one in flight kStuckFactor times longer than predicted (at least kStuckOpNs) sooner
// (its completion, if it comes after all, still charges its overrun to the long-op budget).
#pragma once

#include <array>
#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "gpuqos/scheduler/adaptive_bound.h"
#include "gpuqos/scheduler/policy.h"
#include "gpuqos/scheduler/query_tracker.h"

namespace gpuqos::scheduler {

class BaymaxPolicy final : public Policy {
 public:
  static constexpr std::int64_t kStaleQueryNs = 2'000'000'000;
  static constexpr std::int64_t kStaleOpNs = 10'000'000'000;
  // A best-effort op in flight this much longer than predicted (at least kStuckOpNs) is taken as
  // stuck rather than running: waiting on the device for something the host does
  // (cuStreamWaitValue32 on a flag, a host function) that a held op of its own client keeps the host
  // from doing. Counted against that client's bound or the transfer limit, it would stall the
  // program until kStaleOpNs.
  static constexpr std::int64_t kStuckOpNs = 2'000'000'000;
  static constexpr std::int64_t kStuckFactor = 16;
  // A best-effort transfer in flight holds its transfer slot (max_be_transfers) for this many times
  // its predicted time, at least kSlotFloorNs, at most kStuckOpNs; past it, it runs on unrationed.
  static constexpr std::int64_t kSlotFactor = 4;
  static constexpr std::int64_t kSlotFloorNs = 50'000'000;
  static constexpr std::int64_t kDeadlineHoldNs = 100'000'000;
  static constexpr std::int64_t kLongOpWaitNs = 1'000'000'000;  // a long op's wait for no query in the system
  static constexpr std::int64_t kTailWindowNs = 60'000'000'000;
  static constexpr std::size_t kMaxHoldJobs = 1024;  // jobs with hold times kept (beyond: the total only)
  // Best-effort compute ops not priced as long that were retired as stuck are kept until their
  // completion comes, so one that was running all along still pays its overrun. Beyond this many,
  // the one retired longest ago is dropped (it only loses its charge).
  static constexpr std::size_t kMaxRetiredOps = 1024;
  // A job that says its arrivals: the largest share of its time its queries may keep it busy once
  // each is delayed by what best-effort work may add to it (query_allowance_ns).
  static constexpr double kMaxQueryLoad = 0.7;
  // The load a long op's cost takes a job to be at most (its cost is divided by 1 - load).
  static constexpr double kLongOpMaxLoad = 0.9;
  // A long op next to a job that says its arrivals is priced for the requests arriving in its
  // window at the mean count plus this many standard deviations of it (Poisson: the square root of
  // the mean), not the mean: the misses one op causes come together, and a p99 over a few hundred
  // requests has room for only a few (blocking_cost_ns).
  static constexpr double kLongOpCountSigmas = 2.0;
  // The share hold (ahead_of_share): the other job's compute work in flight counts as using the
  // device until the oldest of it has been in flight kShareOverrun x the upper estimates of all of it
  // + kShareSlackNs (time-sliced beside another job, work takes about twice as long as alone); no
  // head waits for its share longer than
  // kShareHoldNs (then it goes by the other rules); credit is not given beside a job weighed apart
  // that uses the device or posted compute work there within kShareRecentNs.
  static constexpr std::int64_t kShareOverrun = 4;
  static constexpr std::int64_t kShareSlackNs = 10'000'000;
  static constexpr std::int64_t kShareHoldNs = 1'000'000'000;
  static constexpr std::int64_t kShareRecentNs = 100'000'000;
  // A best-effort op's predicted time counts towards its job's credit for less by this factor per op
  // posted after it; a guessed one (ClientState::guessed_within) keeps it off credit this many ops.
  static constexpr double kLongestRecentDecay = 0.98;
  static constexpr std::uint32_t kGuessedMemoryOps = 16;
  static constexpr std::uint32_t kGuessedBoundOps = 32;
  // A high-priority client's compute work on a device counts as ahead of another's next query only
  // while some of it completed (or it began) within this long: completions lost or late for longer
  // would hold best-effort work for as long as it runs.
  static constexpr std::int64_t kHpSilentNs = 1'000'000'000;
  // A high-priority client on no device yet keeps best-effort jobs off credit (its first query could
  // meet credit granted before it came) for this long after it registered, not for good: a process
  // that only says its requests' arrivals while forked workers do its GPU work never comes to a
  // device, and every best-effort op would ask for its grant (a round trip) for as long as it runs.
  // Past it, a query of its arriving later meets at most the bound's worth of credit and backlog.
  static constexpr std::int64_t kUnplacedHighNs = 10'000'000'000;
  // Ops in flight per client: beyond this, its oldest is retired unmeasured, as a stale one. A real
  // device blocks a program's launches with a few thousand queued; a high-priority client that never
  // reports completions (nothing of it is held) would otherwise grow the daemon by every op it posts
  // within kStaleOpNs.
  static constexpr std::size_t kMaxInFlightPerClient = EngineBacklog::kMaxTrackedOpsPerClient;

  explicit BaymaxPolicy(const PolicyOptions& options);
  // Not copied: a copy's ClientState::job_share would point into the original's job_shares_.
  BaymaxPolicy(const BaymaxPolicy&) = delete;
  BaymaxPolicy& operator=(const BaymaxPolicy&) = delete;

  std::string_view name() const override { return "baymax"; }
  Decisions client_registered(const ClientInfo& info, std::int64_t now_ns) override;
  Decisions op_posted(const OpPosted& event) override;
  Decisions op_completed(const OpCompleted& event) override;
  Decisions client_gone(ClientId client, std::int64_t now_ns) override;
  Decisions tick(std::int64_t now_ns) override;
  const EngineBacklog& backlog() const override { return backlog_; }
  bool reconfigure(const PolicyOptions& options) override;
  std::optional<HoldTimes> hold_times() const override { return held_ns_; }
  std::map<std::string, HoldTimes> hold_times_by_job() const override { return held_by_job_; }
  std::optional<PolicyState> state(std::int64_t now_ns) const override;
  std::optional<HeldHead> held_head(ClientId client) const override;
  // PolicyState::tight_targets at now_ns (the daemon warns of each once per job, device, target,
  // slice and process count, once the job has been tight on the device at every check for 5 s). A best-effort process counts on a device while it has compute work
  // there or posted some within kActiveProcessNs: one that posted once and went idle takes no slice.
  // A target shorter than the job's queries is one only once this many of them closed.
  static constexpr int kQueriesBeforeUnreachable = 8;
  std::vector<PolicyState::TightTarget> tight_targets(std::int64_t now_ns) const;
  static constexpr std::int64_t kActiveProcessNs = 10'000'000'000;

  // For tests and status.
  std::int64_t bound_ns() const { return bound_.bound_ns(); }
  std::int64_t be_backlog_ns(std::uint32_t device, Engine engine, std::int64_t now_ns) const;
  std::size_t queued_ops() const;
  const QueryTracker& queries() const { return queries_; }
  // A high-priority client's learned compute work per query on a device (the point prediction; 0:
  // none learned), as tight_targets() counts it ahead of another job's query.
  std::int64_t expected_query_compute_ns(ClientId client, std::uint32_t device) const;
  std::size_t in_flight_ops(ClientId client) const;
  std::uint64_t adaptation_steps() const { return bound_.steps(); }
  // The long-op budget of a device (ns of cost a long best-effort op may spend), and its cap.
  double long_op_budget_ns(std::uint32_t device, std::int64_t now_ns) const;
  double long_op_budget_cap_ns(std::uint32_t device) const;

 private:
  struct Queued {
    ipc::OpDescriptor op;
    std::int64_t predicted_ns = 0;  // the upper estimate (OpPosted)
    std::int64_t expected_ns = 0;   // the point prediction (0: none, the upper estimate stands in)
    std::int64_t point_ns() const { return expected_ns > 0 ? expected_ns : predicted_ns; }
  };
  struct JobShare;
  struct ClientState {
    ClientInfo info;
    std::deque<Queued> queue;
    std::uint64_t posted = 0;
    std::uint64_t granted = 0;  // beyond posted: credit
    // Fair queueing among the processes of its job, by device: predicted compute ns granted there /
    // weight, and its value at the start of the latest grant there (where a client that was idle
    // there starts again). Jobs are ordered by their JobShare first.
    std::map<std::uint32_t, double> vtime, last_start;
    double vtime_on(std::uint32_t device) const {
      const auto it = vtime.find(device);
      return it == vtime.end() ? 0 : it->second;
    }
    double weight() const { return std::max(info.weight, 1e-3); }
    std::int64_t share_held_since_ns = -1;  // when its head was first held for its share (-1: not)
    std::int64_t hp_outstanding_ns = 0;  // high priority: predicted device time not yet completed
    std::size_t in_flight_ops = 0;       // its entries in in_flight_
    // High priority: predicted device time posted in its open query, and learned over closed ones
    // (0 before the first); tight_targets() takes it from the time before the query first waits.
    std::int64_t query_work_ns = 0;
    std::int64_t expected_query_work_ns = 0;
    // The same of its compute work alone, by device, at the point prediction: tight_targets() counts
    // another process's as ahead of a query on a run-to-end device (the upper estimate read an
    // untrained gpuqosd's 4 ms of another job's kernels as 10 ms).
    std::map<std::uint32_t, std::int64_t> query_compute_ns;
    std::map<std::uint32_t, std::int64_t> expected_query_compute_ns;
    // The same of each op posted after the open query's closing synchronisation, by seq: the next
    // query's (QueryTracker reopens one for those still outstanding as the open one closes), counted
    // there when it opens; the open query's again at a later synchronisation (its closing mark now).
    struct NextOp {
      std::int64_t work_ns = 0;
      std::uint32_t device = 0;
      std::int64_t compute_ns = 0;  // 0: not compute
    };
    std::map<std::uint64_t, NextOp> next_query_ops;
    // The OpenQuery::number of the query all of the above is of (0: none): a query that closed
    // unlearned (abandoned by expire(), or dropped at the job's first mark) leaves its work behind,
    // and the next query's first op finds it of another number and starts afresh.
    std::uint64_t work_query = 0;
    void count_in_query(const NextOp& next) {
      query_work_ns += next.work_ns;
      if (next.compute_ns > 0) query_compute_ns[next.device] += next.compute_ns;
    }
    // High priority: its open query's first compute op on a run-to-end device, and the work of
    // other clients outstanding there when it was posted, to tell how long it waited behind that
    // work (note_waited_ahead): at most that work's predicted time, the end of the latest of it seen
    // done, and its own end less its predicted time (a high-priority op's end is late when the shim
    // recorded one event after several of its ops).
    struct FirstCompute {
      std::uint64_t query = 0;  // the OpenQuery::number of the query it is of (0: none)
      std::uint64_t seq = 0;
      std::int64_t posted_ns = 0;
      std::int64_t point_ns = 0;
      std::uint32_t device = 0;
      std::int64_t ahead_ns = 0;  // others' predicted compute work outstanding there when it was posted
      std::vector<std::pair<ClientId, std::uint64_t>> ahead;  // that work: each client's latest seq then
      std::int64_t ahead_end_ns = 0;  // the latest end of that work seen (0: none yet)
      std::int64_t end_ns = 0;        // its own end (0: not yet)
    };
    FirstCompute first_compute;
    // The compute ops posted after the open query's closing synchronisation, as first_compute (their
    // query 0: none yet), noted when posted, by seq (the first kMaxNextFirstCompute of them): the
    // earliest one still outstanding is the first compute op of the query QueryTracker reopens for
    // them (or of the open one, if a later synchronisation closes that), and the work ahead of it
    // is what was in flight as it was posted. One that completes before the close is of no query
    // and is dropped; all go with the rest of the counted work.
    static constexpr std::size_t kMaxNextFirstCompute = 16;
    std::map<std::uint64_t, FirstCompute> next_first_compute;
    // The earliest of next_first_compute, taken out as query `query`'s first compute op (none: seq 0).
    FirstCompute take_next_first_compute(std::uint64_t query) {
      FirstCompute first;
      if (!next_first_compute.empty()) {
        first = std::move(next_first_compute.begin()->second);
        first.query = query;
      }
      next_first_compute.clear();
      return first;
    }
    // Best effort: predicted compute time granted and not completed, by device and stream (a
    // process's streams run side by side in its time slice: the bound on a preemptive device is per
    // stream).
    std::map<std::pair<std::uint32_t, std::uint64_t>, std::int64_t> be_compute_ns;
    std::int64_t be_compute_total_ns() const;                        // on every device
    std::int64_t be_compute_ns_on(std::uint32_t device) const;       // on one
    std::int64_t head_held_since_ns = -1;  // when its queue's head was first held (-1: not held)
    // Best effort: the longest predicted (upper) time of its latest GPU ops (each op's counts for
    // less by 2 % per op posted after it: half after some 34), 0 before the first; and how many more
    // ops it posts before a guessed one (a kernel the predictor does not know) is forgotten. Its
    // credit is sized by the first, and there is none while the second is not 0.
    double longest_recent_ns = 0;
    // The predicted time of the credit it holds and has not spent, by the first.
    double unspent_credit_ns() const {
      return granted > posted ? static_cast<double>(granted - posted) * longest_recent_ns : 0.0;
    }
    std::uint32_t guessed_within = 0;
    std::uint32_t guessed_as_bound = 0;  // its guessed ops counted as the bound so far (kGuessedBoundOps)
    // High priority: predicted compute time posted and not completed, by device, and since when it
    // has not moved (posted onto nothing, or an op of it completed): hp_compute_on.
    struct HpCompute {
      std::int64_t ns = 0;
      std::int64_t since_ns = 0;
    };
    std::map<std::uint32_t, HpCompute> hp_compute;
    // High priority: its ops in flight on each engine (none: no entry), and since when none has moved
    // (posted onto nothing, or one of them completed), over all engines: hp_silent.
    std::map<std::pair<std::uint32_t, Engine>, std::uint32_t> hp_ops_on;
    std::int64_t hp_since_ns = 0;
    std::map<std::uint32_t, std::int64_t> compute_posted_ns;  // best effort: its latest compute op, by device
    // Best effort: its transfers' virtual time among its job's processes, and how many it has
    // queued, by device.
    std::map<std::uint32_t, double> transfer_vtime;
    std::map<std::uint32_t, std::uint32_t> transfers_queued;
    std::map<std::uint32_t, std::uint32_t> compute_queued;  // likewise its compute ops
    // Its job's share by device, once there is one (job_shares_'s nodes stay put until its job's
    // last client goes): ahead_of_share looks up every other client's for each held head, and the
    // lookups by job name took 90 % of a grant round (6.7 ms with 256 best-effort clients).
    mutable std::map<std::uint32_t, const JobShare*> job_share;
    // The devices it has posted GPU work on. A process registers with device 0 whatever it uses
    // (the shim has no context yet), so a job is on the devices its work says, and on its
    // registration's device only until its first op (on none with ClientInfo::kNoDevice, as
    // gpuqosd registers every client).
    std::set<std::uint32_t> devices;
    bool on(std::uint32_t device) const { return devices.empty() ? info.device == device : devices.contains(device); }
    bool placed() const { return !devices.empty() || info.device != ClientInfo::kNoDevice; }
    std::int64_t registered_ns = 0;
    template <class F>
    void for_each_device(F&& f) const {  // each device it is on(), without building a set per call
      if (devices.empty()) {
        if (info.device != ClientInfo::kNoDevice) f(info.device);
        return;
      }
      for (const std::uint32_t device : devices) f(device);
    }
  };
  struct InFlight {
    std::uint32_t device;
    Engine engine;
    std::uint64_t stream;
    std::int64_t predicted_ns;
    std::int64_t since_ns;
    bool high;
    bool priced_long = false;  // charged to the long-op budget when granted
  };
  struct EngineState {
    std::int64_t be_until_ns = 0;        // predicted end of the outstanding best-effort work
    std::int64_t be_outstanding_ns = 0;  // its predicted total
    std::uint32_t be_ops = 0;
    std::uint32_t hp_ops = 0;
  };
  using EngineKey = std::pair<std::uint32_t, Engine>;
  struct LongOpBudget {
    double level_ns = 0;  // at at_ns
    std::int64_t at_ns = 0;
  };

  ClientState& state_of(ClientId client, ipc::Priority priority);
  std::int64_t predicted(const OpPosted& event) const;
  std::int64_t expected(const OpPosted& event) const;  // the point prediction, at most predicted()
  // A high-priority client's first compute op of query `query`, posted now (at posted_ns, as the
  // query tracker took it): the work of the others it waits behind on a run-to-end device
  // (ClientState::FirstCompute).
  ClientState::FirstCompute first_compute_of(ClientId client, std::uint64_t query, const ipc::OpDescriptor& op,
                                             std::int64_t posted_ns, std::int64_t point_ns) const;
  // Tells the query tracker how long the client's open query's first compute op waited, from what
  // is known of it so far.
  void note_waited_ahead(ClientId client, const ClientState& state);
  // A completion of `client`'s: the end of a first compute op or of work one waited behind.
  void first_compute_completion(ClientId client, const ipc::CompletionDescriptor& completion);
  void account(ClientId client, const ipc::OpDescriptor& op, std::int64_t predicted_ns, bool high, std::int64_t now_ns,
               bool priced_long = false);
  // `completed`: by its completion (its job's work moved), not stale, at the cap or with its client.
  void retire(ClientId client, std::uint64_t seq, std::optional<std::int64_t> end_ns, std::int64_t now_ns, bool completed);
  // A stream runs its ops in order: when a high-priority op completes, the client's earlier ones on
  // its stream still in flight are done too, their completions lost (a full completions ring). Kept,
  // one held best-effort work off its engine until kStaleOpNs while the job's other work moved (a
  // review: a lost 4-KB upload's completion held every best-effort transfer for 10 s). Not for
  // best-effort ops: a late completion of theirs still charges an overrun to the long-op budget.
  void retire_earlier_on_its_stream(ClientId client, const ipc::CompletionDescriptor& completion, std::int64_t now_ns);
  void learn(const std::vector<ClosedQuery>& closed);
  // Drops what was counted of a client's queries (ClientState::work_query).
  static void forget_query_work(ClientState& state);
  // The long-op budget's growth per ns of wall time on a device (0: nothing to ration), whether an
  // op is long there, and what it costs from the budget (0: not long, or nothing to pay).
  double long_op_rate(std::uint32_t device) const;
  bool is_long(const Queued& queued) const;
  std::int64_t long_op_cost(const Queued& queued, std::int64_t now_ns) const;
  // How long, of an op of length_ns started on device with no request in the system, a request
  // arriving meanwhile would miss its target for it: the most over the jobs with a target there
  // (length - threshold for a job that does not say its arrivals).
  std::int64_t blocking_cost_ns(std::uint32_t device, std::int64_t length_ns) const;
  // Its sum over one job's queue waits for an op of length_ns and the job's slack: the part of
  // each wait's window before the load's factor, and how many waits were still savable.
  struct WaitSum {
    std::uint64_t kept = 0;  // QueryTracker::queue_waits_kept when taken
    std::int64_t slack_ns = 0;
    double excess = 0;
    std::size_t savable = 0, count = 0;
  };
  const WaitSum& wait_sum(ClientId client, std::int64_t length_ns, std::int64_t slack_ns) const;
  // On a preemptive device: would granting client's op of p make a query arriving now (of any job
  // with a target on the device) wait more slices for best-effort work than allowed? None when such
  // a job has no profile yet, or there is none (then each stream's backlog is bounded instead).
  std::optional<bool> arrivals_held(ClientId client, std::uint32_t device, std::int64_t p) const;
  // Each best-effort job on device with outstanding compute work (all its streams), and client's
  // own even when it has none.
  std::vector<std::pair<ClientId, std::int64_t>> be_compute_work(ClientId client, std::uint32_t device) const;
  // The safety margin kept before a high-priority job's deadlines: its own ([[job]]
  // safety_margin_ms) or the policy's.
  std::int64_t margin_of(const ClientState& state) const;
  // How much later than its start plus its expected time an open query of `client` (a job that
  // says its arrivals) is due: the bound (at least the margin), and no more than lets its queries,
  // each that much longer, keep the job busy kMaxQueryLoad of the time at its measured arrival rate
  // (at least the margin: then only work that drains in the query's idle time goes).
  std::int64_t query_allowance_ns(ClientId client) const;
  // Has another best-effort job granted compute work on device not yet completed, or a compute op
  // there at the head of its queue?
  bool others_have_work(ClientId client, std::uint32_t device) const;
  // Is client's virtual time on device more than one bound of its own device time (bound / weight)
  // ahead of that of a best-effort client of another job, weighed apart from it, using the device
  // (uses_device)?
  bool ahead_of_share(ClientId client, std::uint32_t device, std::int64_t now_ns) const;
  // Do two best-effort clients' jobs differ in weight per process with work on device (so the
  // device's own turns do not split them by weight)?
  bool weighed_apart(const ClientState& a, const ClientState& b, std::uint32_t device) const;
  // Is a best-effort client of another job whose weight per process on device differs using the
  // device, or did it post compute work there within kShareRecentNs? (Then no credit.)
  bool beside_another_weight(ClientId client, std::uint32_t device, std::int64_t now_ns) const;
  // High-priority clients' posted device work not completed there; and the most of it that is not
  // the own work of a client with a target (what its next query would wait for on a device that
  // runs kernels to their end).
  std::int64_t hp_compute_on(const ClientState& state, std::uint32_t device) const;  // counted, as above
  // Likewise for all of a high-priority client's work (kHpSilentNs): silent, its copies and memsets hold no
  // best-effort op on their engine, and its outstanding work is not counted ahead of its queries
  // nor of other jobs' (a lost completion of a 4-KB upload held every best-effort transfer until
  // the op went stale at 10 s; one posted every 500 ms held them for good).
  bool hp_silent(const ClientState& state) const;
  std::int64_t hp_outstanding_live(const ClientState& state) const { return hp_silent(state) ? 0 : state.hp_outstanding_ns; }
  bool live_hp_ops_on(std::uint32_t device, Engine engine) const;
  std::int64_t hp_work_on(std::uint32_t device) const;
  std::int64_t others_hp_work_ns(std::uint32_t device) const;
  // The predicted time of the credit best-effort clients other than `client` on the device (or on
  // none yet) hold and have not spent: it goes unasked, so on a device that runs kernels to their
  // end, once a high-priority job is there, it counts in the backlog a grant must keep within the
  // bound (a review: credit given while no high-priority job was there, then spent beside grants up
  // to the bound, made twice the bound for that job's first query).
  double unspent_credit_ns(ClientId client, std::uint32_t device) const;
  // Whether a client other than `client` has an op queued (read, not granted) on the device.
  bool another_waits_on(ClientId client, std::uint32_t device) const;
  // How many best-effort clients share the bound's credit where `client` is (itself included), and
  // the predicted time of the credit the others there hold and have not spent.
  struct CreditBeside {
    std::size_t holders = 1;
    double unspent_ns = 0;
  };
  CreditBeside credit_beside(ClientId client, const ClientState& state) const;
  // Has client compute work in flight on device that is not far past its prediction (kShareOverrun)?
  // Work that is may be waiting for something a held op would do (a collective's other rank, an
  // event of another job): counting it could hold that op until the stuck-op retirement.
  bool uses_device(ClientId client, std::uint32_t device, std::int64_t now_ns) const;
  // Start-time fair queueing of compute work: a grant of p (the point prediction) on device
  // advances the client's virtual time there by p / weight. A client with nothing queued and
  // nothing in flight on device first starts again at the least start of the latest grants of the
  // other best-effort clients busy there, or with none busy at the start of the device's latest
  // grant (idle time earns nothing), or where it was if that is later.
  void charge_share(ClientState& state, std::uint32_t device, std::int64_t p);
  void restart_if_idle(ClientId client, ClientState& state, std::uint32_t device);
  // Compute work of the client's on the device, queued or in flight. What it has on other engines
  // does not count: a step that begins with an upload, still in flight at its first kernel, kept the
  // clock of a job back from idle, which then took every grant for twice its idle time.
  bool has_compute_work(ClientId client, const ClientState& state, std::uint32_t device) const;
  // The same for best-effort transfers (both directions together, as the transfer limit rations
  // them), kept apart from compute: transfer heads are ordered by it, so the limit's slots go by
  // weight rather than to whichever job keeps a transfer queued (before, ties of compute time went
  // to the lowest client id, which then took every slot). A job (process) with no transfer queued
  // or in flight there starts again at the device's (its job's) transfer virtual time: the start of
  // the latest transfer grant there, whether or not another is busy now, so that time spent idle
  // never buys slots later.
  static bool is_transfer(const ipc::OpDescriptor& op);
  bool has_transfer_work(ClientId client, const ClientState& state, std::uint32_t device) const;
  void charge_transfer_share(ClientState& state, std::uint32_t device, std::int64_t p);
  void restart_transfers_if_idle(ClientId client, ClientState& state, std::uint32_t device);
  // Where a client's queue head goes in the grant order: its job's virtual time, then its own, for
  // the head's kind of work on its device.
  std::pair<double, double> fair_order(const ClientState& state) const;
  // The virtual time of a client's job on device (0 before its first grant there), and the turns
  // a time-slicing device gives the job there against its weight: weight / its processes with
  // compute work there (granted, or at the head of their queues).
  double job_vtime(const ClientState& state, std::uint32_t device) const;
  double weight_per_process(const ClientState& state, std::uint32_t device) const;
  // Ops longer than this are long ops: the configured bound, or the adaptive one when it is looser.
  std::int64_t long_op_threshold_ns() const;
  // Before the rate may change: the budgets grown so far, at the old rate. After: a budget for each
  // device that now has a rate (empty), none for a device that has not.
  void settle_long_budgets(std::int64_t now_ns);
  void refresh_long_budgets(std::int64_t now_ns);
  // Takes cost_ns (if positive) from the device's budget, if it has one, floored at minus the cap;
  // returns whether it did.
  bool debit_long_budget(std::uint32_t device, std::int64_t cost_ns, std::int64_t now_ns);
  // Returns whether the op was priced as long (a long op, whatever it cost: its overrun is not charged).
  bool spend_long_budget(const Queued& queued, std::int64_t now_ns);
  // Charges what an op not priced as long ran over the long-op threshold (its own measured time).
  void charge_overrun(const InFlight& done, std::int64_t own_ns, std::int64_t now_ns);
  // Why the head op of a best-effort client cannot go now: the state of its engine (the compute
  // bound, the transfer limit, a high-priority copy in flight), an open query's deadline, or the
  // long-op budget.
  // own_bound: the client's own compute backlog on the op's stream is at the bound (a preemptive
  // device); it does not close the engine to other clients.
  // share: the client is ahead of its weight's share beside another job's work (ahead_of_share); it
  // does not close the engine either.
  enum class Hold { none, engine, deadline, budget, own_bound, share };
  Hold hold_of(ClientId client, const Queued& queued, std::int64_t now_ns) const;
  bool high_priority_on(std::uint32_t device) const;
  // A query of a job with a target on the device is open (and not overdue), or a request of one is
  // waiting.
  bool query_in_system(std::uint32_t device, std::int64_t now_ns) const;
  // How long until no such query may be in the system there: the longest of the jobs' open queries'
  // expected remaining time (at least their posted work) and their waiting requests' whole ones.
  std::int64_t until_no_query_ns(std::uint32_t device, std::int64_t now_ns) const;
  // Open for more than PolicyState::kOverdueTargets x its job's target: no longer protected.
  static bool overdue(const OpenQuery& query, std::int64_t target_ns, std::int64_t now_ns);
  // A best-effort stream's bound on a preemptive device with no query in the system there:
  // idle_bound_factor (at most config::kMaxIdleBoundFactor, 1000, as a config allows) x the bound now.
  std::int64_t idle_stream_bound_ns() const;
  Decisions grant_ready(std::int64_t now_ns);
  void extend_credit(ClientId client, ClientState& state, Decisions& decisions);

  PolicyOptions options_;
  AdaptiveBound bound_;
  QueryTracker queries_;
  std::map<ClientId, ClientState> clients_;
  std::map<std::pair<ClientId, std::uint64_t>, InFlight> in_flight_;
  // in_flight_ by when each becomes stale (stale_at_ns), so a tick looks only at those that are: a
  // review's high-priority clients that never reported completions left millions in flight, and the
  // tick's walk over all of them stalled the loop 350 ms every 10 ms.
  std::set<std::pair<std::int64_t, std::pair<ClientId, std::uint64_t>>> by_stale_at_;
  // Best-effort transfers in flight, by device and the time they stop holding a transfer slot
  // (slot_free_at_ns): a granted copy may wait on its stream behind its own program's work (a kernel,
  // a host function), and held the one slot until the stuck limit, 2 s, while every other job's
  // transfers waited (2,008 ms for a copy onto another, idle stream, in a review).
  std::set<std::tuple<std::uint32_t, std::int64_t, ClientId, std::uint64_t>> be_transfer_slots_;
  static std::int64_t slot_free_at_ns(const InFlight& flight);
  std::uint32_t transfer_slots_taken(std::uint32_t device, std::int64_t now_ns) const;
  // The compute ops in flight by device and client, their predicted ns summed and their seqs, so a
  // query's first compute op (first_compute_of) reads a sum per client, not every op in flight.
  struct ComputeInFlight {
    std::int64_t predicted_ns = 0;
    std::set<std::uint64_t> seqs;
  };
  std::map<std::uint32_t, std::map<ClientId, ComputeInFlight>> compute_in_flight_;
  static std::int64_t stale_at_ns(const InFlight& flight);
  // Fair queueing and the share hold by job (all its processes together), by device: predicted
  // compute ns granted there / weight, and its value at the start of the job's latest grant there.
  // A job's processes are ordered among themselves by their own (ClientState::vtime).
  struct JobShare {
    double vtime = 0;
    std::optional<double> last_start;
    double process_start = 0;  // the start of its processes' latest grant (where an idle one restarts)
    // Transfers: the job's virtual time, and the start of its processes' latest grant (where one of
    // them that was idle starts again).
    double transfer_vtime = 0;
    double transfer_process_start = 0;
  };
  // The start of the latest compute (transfer) grant by device, where a job that was idle starts
  // again when no other job is busy there (a busy one's least start, if any, for compute).
  std::map<std::uint32_t, double> compute_start_, transfer_start_;
  std::map<std::pair<std::string, std::uint32_t>, JobShare> job_shares_;
  struct Retired {
    InFlight flight;
    std::int64_t retired_ns;
  };
  std::map<std::pair<ClientId, std::uint64_t>, Retired> retired_;  // kMaxRetiredOps
  std::map<EngineKey, EngineState> engines_;
  std::map<std::uint32_t, LongOpBudget> long_budgets_;  // by device
  // wait_sum's, by client and op length, until the client's waits or slack change: a long op held
  // for budget is priced again at every event (policy-bench: 1.2 us a tick over 1,024 waits, against
  // 0.3 with none). Cleared when it holds kMaxWaitSums (a few held ops' lengths at a time).
  static constexpr std::size_t kMaxWaitSums = 64;
  mutable std::map<std::pair<ClientId, std::int64_t>, WaitSum> wait_sums_;
  std::int64_t last_now_ns_ = 0;                         // the latest event's time (for reconfigure)
  // Hold accounting: after each grant round, which waiting head each reason holds; the time to the
  // next round is charged to them, in all and by job (kept across reconnects, like the QoS tracker's).
  void charge_holds(std::int64_t now_ns);
  HoldTimes held_ns_{};
  std::map<std::string, HoldTimes> held_by_job_;
  std::vector<std::pair<ClientId, HoldReason>> waiting_;
  std::int64_t waiting_since_ns_ = 0;
  // The devices whose compute engine the latest round left with nothing in flight and a best-effort
  // compute head held, and the time charged to each so (PolicyState::idle_held).
  void note_idle_holds();
  std::set<std::uint32_t> idle_held_devices_;
  std::map<std::uint32_t, std::int64_t> idle_held_ns_;
  EngineBacklog backlog_;
};

}  // namespace gpuqos::scheduler
