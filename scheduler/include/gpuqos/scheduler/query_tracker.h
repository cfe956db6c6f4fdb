// Query boundaries of high-priority jobs, and how long the rest of an open query usually takes.
//
// A query is what a latency target is about: one request's worth of work, from its first op to the
// synchronisation that waits for it. Boundaries are
// - inferred (the default): a query opens with the first GPU op posted while none of the job's work
//   is outstanding, and closes at the synchronisation mark that drains it: when every op posted
//   before that mark has completed (or at the mark, if they already had). Ops posted after the mark
//   but before the drain open the next query at their own post time;
// - explicit, once the job posts a query_begin or query_arrived mark (gpuqos/query.h): from then on
//   only its marks count; query_begin opens (a second begin while open is ignored) and query_end
//   closes at the mark's arrival. A query_arrived mark says a request arrived (at the mark's
//   posted_ns); the shim gives each query_begin the arrival of the request it begins (the oldest
//   not begun: OpDescriptor::arrived_ns), and the query counts from it: its latency and deadline
//   include the time it waited in the job's own queue. That arrival and every earlier one stop
//   waiting at the begin (even a begin ignored because a query is open), so a lost mark costs one
//   query, not the pairing. Requests that arrived and have not begun wait (at most kMaxArrivals;
//   the policy protects them too); one waiting longer than the stale age is dropped by expire().
//
// Closed queries teach a per-job profile: for the k-th op of a query (k < kProfileOps), how long the
// query still ran after it was posted, how long until the program next waited for the device
// (its next blocking point: a synchronisation mark, a copy to or from pageable memory, the end),
// and how many blocking points followed it (on a time-slicing device each can wait for a slice).
// Best-effort work that drains before that point delays the query by nothing on a device that
// runs work in order; what is left of it delays the query by that much (baymax_policy.h). It falls fast and rises slowly: it estimates the query's own
// time, without the delays best-effort work added to it, because the policy adds those itself (the
// backlog and the op it grants) and the margin on top. A tail estimate counted them twice: each
// delayed query raised it, so less best-effort work went while queries were open (bench: 49 % vs
// 61 % of the ideal leftover at load 0.6, same query tail).
//
// Pure: times come in with each event, in the daemon's clock (CLOCK_MONOTONIC ns); the shim's
// stamps are in the same clock. An op or mark is timed by its stamp (posted_ns: when the program
// made the call), not by when the daemon read it, unless the stamp is ahead of the read, or more
// than kMaxStampLagNs behind both the read and the client's previous op (another clock's: a time
// namespace); and never before the client's previous one.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <set>
#include <vector>

#include "gpuqos/ipc/descriptor.h"
#include "gpuqos/predictor/recent_window.h"

namespace gpuqos::scheduler {

using ClientId = std::uint32_t;

struct ClosedQuery {
  ClientId client = 0;
  std::int64_t opened_ns = 0;
  std::int64_t closed_ns = 0;
  std::uint64_t ops = 0;   // GPU ops posted in it
  bool marked = false;     // explicit marks, not inferred
  bool from_arrival = false;  // opened_ns is its request's arrival (a query_arrived mark), not its start
  std::int64_t latency_ns() const { return closed_ns - opened_ns; }
};

struct OpenQuery {
  std::int64_t opened_ns = 0;     // its request's arrival (marked with query_arrived), else its start
  std::int64_t started_ns = 0;    // when the job began to serve it
  std::uint64_t ops = 0;
  std::int64_t last_op_ns = 0;   // when its latest op was posted (opened_ns before any)
  bool marked = false;
  std::uint64_t closing_seq = 0;  // inferred: the sync mark that will close it (0: none yet)
  bool from_arrival = false;      // opened_ns is its request's arrival
  std::int64_t waited_ahead_ns = 0;  // its first compute op's wait behind work posted before it (waited_ahead)
  // Which of the client's queries it is (1 for the first opened): a query dropped and another opened
  // in one call can have the same opened_ns (a mark's time is held at the previous op's).
  std::uint64_t number = 0;
};

// Queries of a client that ended without closing (QueryTracker::expire).
struct AbandonedQueries {
  ClientId client = 0;
  std::uint64_t queries = 0;
  bool operator==(const AbandonedQueries&) const = default;
};

class QueryTracker {
 public:
  static constexpr std::size_t kProfileOps = 4096;
  // Requests waiting to begin, per client (beyond: the oldest is forgotten, as the shim forgets it;
  // a queue that long has missed every target already, and the policy checks each waiting request
  // at every decision).
  static constexpr std::size_t kMaxArrivals = 256;
  // Inferred queries kept posted behind the open one's closing mark (a pipelined server's requests
  // in flight); past it the newest takes in the rest.
  static constexpr std::size_t kMaxLater = 64;
  // The arrival rate of a job that says its arrivals: the mean gap over its last kRateWindow
  // query_arrived marks, once it has said kMinRateArrivals.
  static constexpr std::size_t kRateWindow = 64;
  static constexpr std::size_t kMinRateArrivals = 8;
  // How many of a job's latest arrivals keep the wait its own queue gave them (queue_waits).
  static constexpr std::size_t kQueueWaitWindow = 1024;
  // How many of a client's latest closed queries own_query_ns() takes its median of.
  static constexpr std::uint32_t kOwnQueryWindow = 64;
  // Ops and marks are timed by the shim's stamp (posted_ns) unless it is older than this when read
  // and than the client's previous op.
  static constexpr std::int64_t kMaxStampLagNs = 1'000'000'000;

  // Every op and mark a tracked (high-priority) client posts, in seq order.
  std::vector<ClosedQuery> posted(ClientId client, const ipc::OpDescriptor& op, std::int64_t now_ns);
  // Every completion of such a client's ops.
  std::vector<ClosedQuery> completed(ClientId client, const ipc::CompletionDescriptor& completion,
                                     std::int64_t now_ns);
  // Forgets the client; returns how many of its queries end unrecorded: an open marked query, or
  // inferred ones the program had synchronised on (the open one and those kept behind its mark).
  // An inferred query it never synchronised on (the async tail of a program that exits) is none.
  std::uint64_t client_gone(ClientId client);
  // Forgets ops outstanding longer than max_age_ns and kLostCompletionNs (their completions were
  // lost) and abandons, with nothing learned, each query whose latest op is older than max_age_ns
  // or that waited on such an op (inferred boundaries); returns the clients with queries it
  // abandoned, counted as client_gone counts them.
  static constexpr std::int64_t kLostCompletionNs = 10'000'000'000;
  // Ops outstanding per client: beyond this, the oldest is forgotten as lost. A real device blocks a
  // program's launches with a few thousand queued; a client that never reports completions would
  // otherwise grow the daemon by every op it posts within kLostCompletionNs.
  static constexpr std::size_t kMaxOutstandingOps = 1 << 16;
  std::vector<AbandonedQueries> expire(std::int64_t now_ns, std::int64_t max_age_ns);

  // The client's open query, or nullptr.
  const OpenQuery* open_query(ClientId client) const;
  // How much longer the open query is expected to run from now: the profile's remaining time after
  // its latest op, less the time since that op, and at least the profile's time after its next op
  // (a late query has not posted it yet); 0 with no open query or no profile yet.
  std::int64_t expected_remaining_ns(ClientId client, std::int64_t now_ns) const;
  // How much longer until the open query's program next waits for the device (a blocking point:
  // a synchronisation, or a copy to or from pageable host memory), the same way: the profile's
  // time from its latest op to the next blocking point, less the time since that op; 0 with no
  // open query or no profile yet (every best-effort op then counts as delaying the query).
  std::int64_t expected_unblocked_ns(ClientId client, std::int64_t now_ns) const;
  // How many more times the open query's program is expected to wait for the device, its end
  // included: the profile's count after its latest op (a whole query's before any). At least 1 while a
  // query is open (its end), 0 with none. Learned conservatively: it rises at once to a larger
  // count and falls a sixteenth of the way to a smaller one.
  double expected_blocking_points(ClientId client) const;
  // The same for a whole query (1 before any closed).
  double expected_query_blocking_points(ClientId client) const;
  // The profile's time from a query's start to its first blocking point (0: none closed yet).
  std::int64_t expected_query_unblocked_ns(ClientId client) const;
  // The profile's expected length of a whole query, from its start (0: none closed yet).
  std::int64_t expected_query_ns(ClientId client) const;
  // The open query's first compute op waited this long on the device behind work posted before it
  // (the policy's estimate, from its completion and its predicted time); nothing with no open query.
  void waited_ahead(ClientId client, std::int64_t wait_ns);
  // The median of the client's latest kOwnQueryWindow queries' own times (0: none closed yet): from
  // its start to its end, less the time its first compute op waited behind work posted before it
  // (waited_ahead): about what a query takes when nothing delays it. The profile's time counts that
  // wait: a user test's queries of 2.2 ms alone came out at 4.4-5.3 ms beside a training job, and
  // even their 10th percentile at 3.4-5.2 ms (every query found training work ahead).
  std::int64_t own_query_ns(ClientId client) const;
  // How many of the client's queries have closed (0 for a client not known).
  std::uint64_t closed_queries(ClientId client) const;
  // The arrival times of the client's requests that have not begun, in the order they were said.
  const std::deque<std::int64_t>& waiting_arrivals(ClientId client) const;
  // Has the client said when its requests arrive (a query_arrived mark)? Then its queries count from
  // their arrival, and work it has not been sent yet waits behind what it has.
  bool says_arrivals(ClientId client) const;
  // The mean time between the client's request arrivals (query_arrived marks, begun or not) over
  // its latest kRateWindow; 0 before kMinRateArrivals, or when their stamps do not move forward.
  std::int64_t mean_arrival_gap_ns(ClientId client) const;
  // For a job that says its arrivals: how long each of its latest kQueueWaitWindow requests would
  // have waited in the job's own queue had every query taken the profile's whole time and nothing
  // else delayed it (Lindley's recursion over the arrival stamps): the queueing its arrivals make
  // by themselves, bursts included. Arrivals before the first query closed are not counted.
  const std::deque<std::int64_t>& queue_waits(ClientId client) const;
  // How many waits queue_waits has ever kept for the client (0 for one not known): it changes
  // whenever they do, so a sum over them can be kept until it does.
  std::uint64_t queue_waits_kept(ClientId client) const;
  std::uint64_t outstanding_ops(ClientId client) const;
  // When the client's latest op or mark was posted, as its profile takes it (0: none yet).
  std::int64_t last_posted_ns(ClientId client) const;

 private:
  struct State {
    struct Posted {
      std::int64_t at_ns;
      bool blocks;  // a blocking point (a pageable copy)
    };
    std::map<std::uint64_t, Posted> outstanding;  // GPU op seq -> when posted
    bool lost_by_cap = false;  // an op of `outstanding` was forgotten past kMaxOutstandingOps
    bool explicit_marks = false;
    bool open = false;
    std::uint64_t opened_queries = 0;  // OpenQuery::number of the latest
    OpenQuery query;
    // Inferred: the queries posted after the open one's closing mark, oldest first, each up to the
    // first sync after its first op (sync_seq 0: none yet, only the newest).
    struct Later {
      std::int64_t first_op_ns = 0, last_op_ns = 0;
      std::uint64_t ops = 0, sync_seq = 0;
      bool synced = false;  // a sync came (past kMaxLater its sync_seq is cleared: it takes in more)
      // Its op_times and block_times, as the open query's (its ops may be done before it opens);
      // within later_times for all of them.
      std::vector<std::int64_t> op_times, block_times;
    };
    std::deque<Later> later;
    std::size_t later_times = 0;  // times kept in `later`, at most kProfileOps
    bool open_synced = false;  // the open query came from a Later that was synced (Later::synced)
    std::vector<std::int64_t> op_times;  // post time of each op of the open query (first kProfileOps)
    std::vector<std::int64_t> block_times;  // post times of the open query's blocking points
    std::deque<std::int64_t> arrivals;     // requests that arrived and have not begun, oldest first
    bool says_arrivals = false;            // a query_arrived mark came
    std::int64_t last_begun_arrival_ns = 0;  // the latest arrival a begin named
    std::int64_t last_posted_ns = 0;         // the stamp of its latest op or mark, as taken
    std::deque<std::int64_t> recent_arrivals;  // the latest kRateWindow arrivals said, in order said
    std::deque<std::int64_t> queue_waits;      // queue_waits(), oldest first
    std::uint64_t queue_waits_kept = 0;        // queue_waits_kept()
    std::vector<std::int64_t> remaining;  // profile: after op k, the query ran this much longer
    std::vector<std::int64_t> unblocked;  // profile: after op k, its next blocking point came this much later
    std::vector<double> blocks;           // profile: after op k, the query waited for the device this often
    std::int64_t whole = 0;               // profile: a whole query, from its start
    std::int64_t whole_unblocked = 0;     // profile: from its start to its first blocking point
    double whole_blocks = 0;              // profile: blocking points of a whole query
    std::uint64_t closed_queries = 0;     // queries closed so far
    predictor::RecentWindow recent_own{kOwnQueryWindow};  // the latest queries' own times (ns)
  };
  // Opens a query started at at_ns whose request arrived at arrived_ns (<= at_ns).
  void open(State& state, std::int64_t at_ns, std::int64_t arrived_ns, bool from_arrival);
  void open(State& state, std::int64_t at_ns) { open(state, at_ns, at_ns, false); }
  static void switch_to_marks(State& state);
  // Keeps a later query's op or blocking time in `times`, while `later` holds under kProfileOps.
  static void keep_later_time(State& state, std::vector<std::int64_t>& times, std::int64_t at_ns);
  // The open queries that end unrecorded if the client's state is dropped now (client_gone).
  static std::uint64_t unfinished_queries(const State& state);
  std::int64_t expected_from(ClientId client, std::int64_t now_ns, std::vector<std::int64_t> State::*after_op,
                             std::int64_t State::*whole) const;
  // Records `op` as a blocking point of the open query when it is one.
  static void note_blocking(State& state, const ipc::OpDescriptor& op, std::int64_t now_ns);
  ClosedQuery close(ClientId client, State& state, std::int64_t at_ns);
  // Inferred: closes the query if its closing mark has been drained.
  void maybe_close(ClientId client, State& state, std::int64_t at_ns, std::vector<ClosedQuery>& closed);

  std::map<ClientId, State> clients_;
};

}  // namespace gpuqos::scheduler
