// Tests of query boundaries (inferred from sync marks, or explicit marks) and the remaining-time
// profile, in a virtual clock.
#include "gpuqos/scheduler/query_tracker.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace gpuqos::scheduler {
namespace {

constexpr std::int64_t kMs = 1'000'000;
constexpr ClientId kServe = 1;

ipc::OpDescriptor op(std::uint64_t seq, ipc::OpKind kind = ipc::OpKind::kernel) {
  ipc::OpDescriptor d{};
  d.seq = seq;
  d.kind = kind;
  if (kind == ipc::OpKind::kernel) d.kernel_id = 1;
  return d;
}

ipc::CompletionDescriptor done(std::uint64_t seq, std::int64_t end_ns) {
  return ipc::CompletionDescriptor{seq, end_ns - 1, end_ns, 0, 0};
}

TEST(QueryTracker, AQueryOpensWithTheFirstOpAndClosesWhenItsSyncDrains) {
  QueryTracker tracker;
  EXPECT_TRUE(tracker.posted(kServe, op(1), 1 * kMs).empty());
  ASSERT_NE(tracker.open_query(kServe), nullptr);
  EXPECT_EQ(tracker.open_query(kServe)->opened_ns, 1 * kMs);
  EXPECT_TRUE(tracker.posted(kServe, op(2), 2 * kMs).empty());
  EXPECT_TRUE(tracker.completed(kServe, done(1, 3 * kMs), 3 * kMs).empty()) << "no sync yet";
  EXPECT_TRUE(tracker.posted(kServe, op(3, ipc::OpKind::sync), 3 * kMs).empty()) << "op 2 still runs";
  const auto closed = tracker.completed(kServe, done(2, 5 * kMs), 5 * kMs + 10);
  ASSERT_EQ(closed.size(), 1u);
  EXPECT_EQ(closed[0].latency_ns(), 4 * kMs) << "from the first op to the end of the last";
  EXPECT_EQ(closed[0].ops, 2u);
  EXPECT_FALSE(closed[0].marked);
  EXPECT_EQ(tracker.open_query(kServe), nullptr);
}

ipc::OpDescriptor stamped(std::uint64_t seq, std::int64_t posted_ns, ipc::OpKind kind = ipc::OpKind::kernel) {
  ipc::OpDescriptor d = op(seq, kind);
  d.posted_ns = posted_ns;
  return d;
}

// Ops and marks are timed by the shim's stamp, when the program made the call: a daemon that reads
// them late (descheduled on a busy machine) still sees the query as long as it was. Measured by a
// stress run of Qos.ATargetTighterThanATimeSliceIsWarnedOfOnce: timed by the read, the 3-ms query
// came out too short to be tight in 22 of 30 runs.
TEST(QueryTracker, OpsAreTimedByTheirStampNotByWhenTheDaemonReadThem) {
  QueryTracker tracker;
  // Posted at 1 ms (two kernels and the sync), done at 4 ms, all read at 5 ms.
  (void)tracker.posted(kServe, stamped(1, 1 * kMs), 5 * kMs);
  (void)tracker.posted(kServe, stamped(2, 1 * kMs), 5 * kMs);
  ASSERT_NE(tracker.open_query(kServe), nullptr);
  EXPECT_EQ(tracker.open_query(kServe)->opened_ns, 1 * kMs);
  EXPECT_EQ(tracker.open_query(kServe)->last_op_ns, 1 * kMs);
  (void)tracker.posted(kServe, stamped(3, 1 * kMs, ipc::OpKind::sync), 5 * kMs);
  (void)tracker.completed(kServe, done(1, 3 * kMs), 5 * kMs);
  const auto closed = tracker.completed(kServe, done(2, 4 * kMs), 5 * kMs);
  ASSERT_EQ(closed.size(), 1u);
  EXPECT_EQ(closed[0].latency_ns(), 3 * kMs) << "1 to 4 ms, not 5 to 5";
  EXPECT_EQ(tracker.expected_query_ns(kServe), 3 * kMs);
  // A stamp that cannot be this clock's (ahead of the daemon, or older than kMaxStampLagNs both when
  // read and than the client's previous op: a client's first op, then every one of a clock an hour
  // behind) counts as the read time; a stamp before the client's previous one as that one (threads
  // post a little out of order), so the profile's times stay in order.
  const std::int64_t read = 10 * kMs + 2 * QueryTracker::kMaxStampLagNs;
  constexpr ClientId kBehind = 2;
  (void)tracker.posted(kBehind, stamped(1, kMs), read);
  EXPECT_EQ(tracker.open_query(kBehind)->opened_ns, read) << "its first op: older than the lag";
  (void)tracker.posted(kBehind, stamped(2, 2 * kMs), read + kMs);
  EXPECT_EQ(tracker.open_query(kBehind)->last_op_ns, read + kMs) << "older than the lag, and than its previous op";
  (void)tracker.posted(kServe, stamped(4, read - kMs), read);
  EXPECT_EQ(tracker.open_query(kServe)->opened_ns, read - kMs);
  (void)tracker.posted(kServe, stamped(5, read + kMs), read + 2 * kMs);
  EXPECT_EQ(tracker.open_query(kServe)->last_op_ns, read + kMs) << "a stamp within the lag";
  (void)tracker.posted(kServe, stamped(6, read + kMs / 2), read + 2 * kMs);
  EXPECT_EQ(tracker.open_query(kServe)->last_op_ns, read + kMs) << "not before the previous op";
  (void)tracker.posted(kServe, stamped(7, read + 5 * kMs), read + 3 * kMs);
  EXPECT_EQ(tracker.open_query(kServe)->last_op_ns, read + 3 * kMs) << "a stamp in the future";
}

TEST(QueryTracker, ASyncAfterEverythingFinishedClosesAtOnce) {
  QueryTracker tracker;
  (void)tracker.posted(kServe, op(1), 0);
  (void)tracker.completed(kServe, done(1, 1 * kMs), 1 * kMs);
  const auto closed = tracker.posted(kServe, op(2, ipc::OpKind::sync), 2 * kMs);
  ASSERT_EQ(closed.size(), 1u);
  EXPECT_EQ(closed[0].latency_ns(), 2 * kMs);
}

TEST(QueryTracker, WorkPostedAfterTheClosingSyncStartsTheNextQuery) {
  QueryTracker tracker;
  (void)tracker.posted(kServe, op(1), 0);
  (void)tracker.posted(kServe, op(2, ipc::OpKind::sync), 1 * kMs);
  (void)tracker.posted(kServe, op(3), 2 * kMs);  // another thread's next request
  ASSERT_EQ(tracker.completed(kServe, done(1, 3 * kMs), 3 * kMs).size(), 1u);
  ASSERT_NE(tracker.open_query(kServe), nullptr);
  EXPECT_EQ(tracker.open_query(kServe)->opened_ns, 2 * kMs);
  EXPECT_EQ(tracker.open_query(kServe)->ops, 1u);
}

// A server with a request in flight on each of two streams, syncing them by turns: each query
// closes once the work posted before its first sync is done. The mark moved on with every later
// sync (a review): some op below it was always outstanding, so no query closed until the job
// paused, and the idle rule then dropped the busy job's query unrecorded.
TEST(QueryTracker, ALaterSyncDoesNotMoveTheClosingMark) {
  QueryTracker tracker;
  (void)tracker.posted(kServe, op(1), 0);                         // request 1 on stream A
  (void)tracker.posted(kServe, op(2), 1 * kMs);                   // request 2 on stream B
  (void)tracker.posted(kServe, op(3, ipc::OpKind::sync), 2 * kMs);  // sync A
  (void)tracker.posted(kServe, op(4), 3 * kMs);                   // request 3 on stream A
  (void)tracker.posted(kServe, op(5, ipc::OpKind::sync), 4 * kMs);  // sync B
  EXPECT_TRUE(tracker.completed(kServe, done(1, 5 * kMs), 5 * kMs).empty()) << "op 2 is before the first sync";
  const auto first = tracker.completed(kServe, done(2, 6 * kMs), 6 * kMs);
  ASSERT_EQ(first.size(), 1u) << "everything before the first sync is done";
  EXPECT_EQ(first[0].latency_ns(), 6 * kMs);
  EXPECT_EQ(first[0].ops, 2u);
  ASSERT_NE(tracker.open_query(kServe), nullptr) << "request 3 is the next query";
  EXPECT_EQ(tracker.open_query(kServe)->opened_ns, 3 * kMs);
  EXPECT_EQ(tracker.open_query(kServe)->closing_seq, 5u) << "closed by the first sync after the mark";
  const auto second = tracker.completed(kServe, done(4, 8 * kMs), 8 * kMs);
  ASSERT_EQ(second.size(), 1u);
  EXPECT_EQ(second[0].latency_ns(), 5 * kMs);
  EXPECT_EQ(tracker.open_query(kServe), nullptr);
}

// The next query's sync may be drained already when the one before closes: both close at once.
TEST(QueryTracker, TheNextQuerysSyncDrainedAlreadyClosesItToo) {
  QueryTracker tracker;
  (void)tracker.posted(kServe, op(1), 0);
  (void)tracker.posted(kServe, op(2, ipc::OpKind::sync), 1 * kMs);
  (void)tracker.posted(kServe, op(3), 2 * kMs);
  (void)tracker.posted(kServe, op(4, ipc::OpKind::sync), 3 * kMs);
  (void)tracker.posted(kServe, op(5), 4 * kMs);  // a third request, not synced yet
  EXPECT_TRUE(tracker.completed(kServe, done(3, 5 * kMs), 5 * kMs).empty());
  const auto both = tracker.completed(kServe, done(1, 6 * kMs), 6 * kMs);
  ASSERT_EQ(both.size(), 2u);
  EXPECT_EQ(both[0].opened_ns, 0);
  EXPECT_EQ(both[1].opened_ns, 2 * kMs);
  ASSERT_NE(tracker.open_query(kServe), nullptr);
  EXPECT_EQ(tracker.open_query(kServe)->opened_ns, 4 * kMs);
  EXPECT_EQ(tracker.open_query(kServe)->closing_seq, 0u);
}

// The next request's work done before the query ahead of it closed is still that request's query,
// open since its first op (it was lost: the next query opened only with the next op posted).
TEST(QueryTracker, WorkAfterTheMarkDoneBeforeTheCloseIsStillTheNextQuery) {
  QueryTracker tracker;
  (void)tracker.posted(kServe, op(1), 0);
  (void)tracker.posted(kServe, op(2, ipc::OpKind::sync), 1 * kMs);
  (void)tracker.posted(kServe, op(3), 2 * kMs);
  (void)tracker.posted(kServe, op(4, ipc::OpKind::sync), 2 * kMs);
  (void)tracker.posted(kServe, op(5, ipc::OpKind::sync), 2 * kMs);  // no op since the last: no query
  EXPECT_TRUE(tracker.completed(kServe, done(3, 3 * kMs), 3 * kMs).empty());
  const auto both = tracker.completed(kServe, done(1, 4 * kMs), 4 * kMs);
  ASSERT_EQ(both.size(), 2u);
  EXPECT_EQ(both[1].opened_ns, 2 * kMs);
  EXPECT_EQ(both[1].ops, 1u);
  EXPECT_EQ(tracker.open_query(kServe), nullptr);
}

// A pipelined server's next request whose work was done before the query ahead of it closed: the
// reopened query's per-op times are its own ops' post times, done or not. They were rebuilt from the
// ops still outstanding only, so with all of them done the open query had 4 ops and no times (the
// estimate read past the end of its times: a review), and with some done op k had another op's time.
TEST(QueryTracker, ANextQuerysOpsDoneBeforeItOpensKeepTheirOwnTimes) {
  for (const std::uint64_t done_early : {4u, 2u}) {
    SCOPED_TRACE(std::to_string(done_early) + " of the next query's 4 ops done before it opens");
    QueryTracker tracker;
    // A profile: 4 ops posted 1 ms apart, the query closed 3 ms after the last (after op k, 6 - k ms).
    for (std::uint64_t k = 0; k < 4; ++k) (void)tracker.posted(kServe, op(k + 1), static_cast<std::int64_t>(k) * kMs);
    (void)tracker.posted(kServe, op(5, ipc::OpKind::sync), 3 * kMs);
    for (std::uint64_t k = 1; k <= 4; ++k) (void)tracker.completed(kServe, done(k, 6 * kMs), 6 * kMs);
    ASSERT_EQ(tracker.open_query(kServe), nullptr);
    // A query (op 6, its sync), then the next one's 4 ops at 101..104 ms, on another stream.
    (void)tracker.posted(kServe, op(6), 100 * kMs);
    (void)tracker.posted(kServe, op(7, ipc::OpKind::sync), 100 * kMs);
    for (std::uint64_t k = 0; k < 4; ++k) {
      (void)tracker.posted(kServe, op(8 + k), (101 + static_cast<std::int64_t>(k)) * kMs);
    }
    for (std::uint64_t k = 0; k < done_early; ++k) (void)tracker.completed(kServe, done(8 + k, 105 * kMs), 105 * kMs);
    ASSERT_EQ(tracker.completed(kServe, done(6, 106 * kMs), 106 * kMs).size(), 1u);
    ASSERT_NE(tracker.open_query(kServe), nullptr);
    EXPECT_EQ(tracker.open_query(kServe)->ops, 4u);
    EXPECT_EQ(tracker.expected_remaining_ns(kServe, 106 * kMs), 1 * kMs) << "after its 4th op (104 ms): 3 ms";
  }
}

// The later queries keep at most kProfileOps times in all: one reopened with fewer times than ops
// keeps no time of the ops it gets after (op k's time is at k, or not kept): the next op's time was
// appended at the first free index and taken as an earlier op's (a review).
// A profile (10 ops at 0..9 ms, done at 20 ms), then A (one op, its sync) and B behind it with
// `b_ops` ops and its sync, and C's `c_ops` ops behind B; A and B done. With b_ops = kProfileOps - 3
// B keeps all but 3 of the times (its sync takes one), and C's ops get the last 2.
struct CutTimes {
  QueryTracker tracker;
  std::uint64_t seq = 11;
  std::uint64_t c_first = 0;  // C's first op
};
void run_queries_behind_a_long_one(CutTimes& run, std::size_t b_ops, int c_ops) {
  QueryTracker& tracker = run.tracker;
  for (std::uint64_t k = 0; k < 10; ++k) (void)tracker.posted(kServe, op(k + 1), static_cast<std::int64_t>(k) * kMs);
  (void)tracker.posted(kServe, op(11, ipc::OpKind::sync), 9 * kMs);
  for (std::uint64_t k = 1; k <= 10; ++k) (void)tracker.completed(kServe, done(k, 20 * kMs), 20 * kMs);
  std::uint64_t& seq = run.seq;
  (void)tracker.posted(kServe, op(++seq), 100 * kMs);
  const std::uint64_t a_op = seq;
  (void)tracker.posted(kServe, op(++seq, ipc::OpKind::sync), 100 * kMs);
  const std::uint64_t b_first = seq + 1;
  for (std::size_t i = 0; i < b_ops; ++i) (void)tracker.posted(kServe, op(++seq), 101 * kMs);
  const std::uint64_t b_last = seq;
  (void)tracker.posted(kServe, op(++seq, ipc::OpKind::sync), 101 * kMs);
  run.c_first = seq + 1;
  for (int i = 0; i < c_ops; ++i) (void)tracker.posted(kServe, op(++seq), 102 * kMs);
  constexpr std::int64_t kDone = 102 * kMs + 200'000;
  (void)tracker.completed(kServe, done(a_op, kDone), kDone);
  for (std::uint64_t s = b_first; s <= b_last; ++s) (void)tracker.completed(kServe, done(s, kDone), kDone);
}

// C's 11th op has no time kept (its 3rd to 10th have none): when C closes, the profile learns from
// its first 2 ops only, as if the 11th had not come (a review: it was kept as the 3rd's).
TEST(QueryTracker, AReopenedQueryPastTheKeptTimesKeepsNoMisplacedTime) {
  CutTimes with_11th, without;
  run_queries_behind_a_long_one(with_11th, QueryTracker::kProfileOps - 3, 10);
  run_queries_behind_a_long_one(without, QueryTracker::kProfileOps - 3, 10);
  ASSERT_NE(with_11th.tracker.open_query(kServe), nullptr);
  ASSERT_EQ(with_11th.tracker.open_query(kServe)->ops, 10u) << "C, open";
  (void)with_11th.tracker.posted(kServe, op(++with_11th.seq), 110 * kMs);  // C's 11th op
  for (CutTimes* run : {&with_11th, &without}) {
    QueryTracker& tracker = run->tracker;
    const std::uint64_t c_last = run->seq;
    (void)tracker.posted(kServe, op(++run->seq, ipc::OpKind::sync), 110 * kMs);
    std::size_t closed = 0;
    for (std::uint64_t s = run->c_first; s <= c_last; ++s) {
      closed += tracker.completed(kServe, done(s, 111 * kMs), 111 * kMs).size();
    }
    ASSERT_EQ(closed, 1u) << "C";
    for (int i = 0; i < 3; ++i) (void)tracker.posted(kServe, op(++run->seq), 200 * kMs);  // D
  }
  EXPECT_EQ(with_11th.tracker.expected_remaining_ns(kServe, 200 * kMs),
            without.tracker.expected_remaining_ns(kServe, 200 * kMs))
      << "D after its 3rd op: the profile of the 3rd op learned nothing from C's 11th";
}

// A query whose times were cut (behind kProfileOps of queued work) is estimated from its latest op,
// as one that kept them: from its last op with a time, the floor of that op's next (an early op's,
// long) did not decay, and later ops did not count.
TEST(QueryTracker, AQueryWithItsTimesCutIsEstimatedFromItsLatestOp) {
  CutTimes cut, kept;
  run_queries_behind_a_long_one(cut, QueryTracker::kProfileOps - 3, 5);
  run_queries_behind_a_long_one(kept, 20, 5);  // the same profile for C's ops: B's 20 ops learn as its 4,093
  for (CutTimes* run : {&cut, &kept}) {
    ASSERT_NE(run->tracker.open_query(kServe), nullptr);
    ASSERT_EQ(run->tracker.open_query(kServe)->ops, 5u) << "C, open";
  }
  constexpr std::int64_t kNow = 102 * kMs + 300'000;
  for (const std::int64_t at : {kNow, kNow + kMs, kNow + 2 * kMs, kNow + 10 * kMs}) {
    EXPECT_EQ(cut.tracker.expected_remaining_ns(kServe, at), kept.tracker.expected_remaining_ns(kServe, at)) << at;
    EXPECT_EQ(cut.tracker.expected_unblocked_ns(kServe, at), kept.tracker.expected_unblocked_ns(kServe, at)) << at;
  }
  EXPECT_EQ(cut.tracker.expected_blocking_points(kServe), kept.tracker.expected_blocking_points(kServe));
  for (CutTimes* run : {&cut, &kept}) (void)run->tracker.posted(kServe, op(++run->seq), kNow + 3 * kMs);  // C's 6th
  EXPECT_EQ(cut.tracker.expected_remaining_ns(kServe, kNow + 3 * kMs),
            kept.tracker.expected_remaining_ns(kServe, kNow + 3 * kMs));
}

// Past QueryTracker::kMaxLater requests behind the open query's mark the newest takes in the rest.
TEST(QueryTracker, QueriesBehindTheMarkAreBounded) {
  QueryTracker tracker;
  (void)tracker.posted(kServe, op(1), 0);
  std::uint64_t seq = 1;
  for (std::size_t i = 0; i < QueryTracker::kMaxLater + 10; ++i) {
    (void)tracker.posted(kServe, op(++seq, ipc::OpKind::sync), static_cast<std::int64_t>(i) * kMs);
    (void)tracker.posted(kServe, op(++seq), static_cast<std::int64_t>(i) * kMs);
  }
  (void)tracker.posted(kServe, op(++seq, ipc::OpKind::sync), 100 * kMs);
  std::size_t closed = tracker.completed(kServe, done(1, 101 * kMs), 101 * kMs).size();
  for (std::uint64_t s = 3; s < seq; s += 2) closed += tracker.completed(kServe, done(s, 102 * kMs), 102 * kMs).size();
  EXPECT_EQ(closed, 1 + QueryTracker::kMaxLater);
  EXPECT_EQ(tracker.open_query(kServe), nullptr);
}

// A query whose closing sync waits for a long op is not idle while its job goes on posting the next
// query's work: the idle rule dropped it 2 s after the mark (a review).
TEST(QueryTracker, AQueryWaitingOnItsMarkIsNotIdleWhileTheJobPosts) {
  constexpr std::int64_t kAge = 2'000 * kMs;
  QueryTracker tracker;
  (void)tracker.posted(kServe, op(1), 0);  // a 5-s op
  (void)tracker.posted(kServe, op(2, ipc::OpKind::sync), 1 * kMs);
  std::uint64_t seq = 2;
  for (std::int64_t t = 100 * kMs; t < 5'000 * kMs; t += 100 * kMs) {
    (void)tracker.posted(kServe, op(++seq), t);  // other threads' work, after the mark
    (void)tracker.completed(kServe, done(seq, t + 10), t + 10);
    EXPECT_TRUE(tracker.expire(t + 20, kAge).empty()) << t;
  }
  const auto closed = tracker.completed(kServe, done(1, 5'000 * kMs), 5'000 * kMs);
  ASSERT_EQ(closed.size(), 1u) << "recorded, not dropped";
  EXPECT_EQ(closed[0].latency_ns(), 5'000 * kMs);
}

TEST(QueryTracker, ExplicitMarksReplaceInference) {
  QueryTracker tracker;
  (void)tracker.posted(kServe, op(1, ipc::OpKind::query_begin), 1 * kMs);
  (void)tracker.posted(kServe, op(2), 1 * kMs);
  EXPECT_TRUE(tracker.posted(kServe, op(3, ipc::OpKind::sync), 2 * kMs).empty()) << "syncs no longer close";
  (void)tracker.completed(kServe, done(2, 3 * kMs), 3 * kMs);
  ASSERT_NE(tracker.open_query(kServe), nullptr);
  const auto closed = tracker.posted(kServe, op(4, ipc::OpKind::query_end), 7 * kMs);
  ASSERT_EQ(closed.size(), 1u);
  EXPECT_EQ(closed[0].latency_ns(), 6 * kMs);
  EXPECT_TRUE(closed[0].marked);
  (void)tracker.posted(kServe, op(5), 8 * kMs);
  EXPECT_EQ(tracker.open_query(kServe), nullptr) << "work outside a marked query opens none";
}

ipc::OpDescriptor arrived(std::uint64_t seq, std::int64_t posted_ns) {
  ipc::OpDescriptor d = op(seq, ipc::OpKind::query_arrived);
  d.posted_ns = posted_ns;
  return d;
}

// A begin naming the arrival of the request it begins, as the shim sends it (0: none).
ipc::OpDescriptor begin(std::uint64_t seq, std::int64_t arrived_ns) {
  ipc::OpDescriptor d = op(seq, ipc::OpKind::query_begin);
  d.arrived_ns = arrived_ns;
  return d;
}

// Whether a job says when its requests arrive: only a query_arrived mark tells (begin and end
// marks alone count queries from their start).
TEST(QueryTracker, SaysArrivalsOnlyAfterAnArrivalMark) {
  QueryTracker tracker;
  (void)tracker.posted(kServe, begin(1, 0), 0);
  (void)tracker.posted(kServe, op(2, ipc::OpKind::query_end), kMs);
  EXPECT_FALSE(tracker.says_arrivals(kServe)) << "marks, but no arrival";
  (void)tracker.posted(kServe, arrived(3, 2 * kMs), 2 * kMs);
  EXPECT_TRUE(tracker.says_arrivals(kServe));
  EXPECT_FALSE(tracker.says_arrivals(kServe + 1)) << "a client never seen";
  tracker.client_gone(kServe);
  EXPECT_FALSE(tracker.says_arrivals(kServe)) << "forgotten with the client";
}

// A user test: gpuqosd stopped for 3 s (SIGSTOP; a starved loop is the same) read the marks left in
// a job's ring long after they were stamped. Timed by the read, its 2-ms query came out 3 s long
// (the begin kept its request's arrival), p99 2,986 ms, the job OVER its target for as long as it ran.
TEST(QueryTracker, MarksReadAfterAStallAreTimedByTheirStamps) {
  QueryTracker tracker;
  (void)tracker.posted(kServe, arrived(1, 1 * kMs), 1 * kMs);
  (void)tracker.posted(kServe, stamped(2, 1 * kMs, ipc::OpKind::query_begin), 1 * kMs);
  (void)tracker.posted(kServe, stamped(3, 3 * kMs, ipc::OpKind::query_end), 3 * kMs);
  const std::int64_t stall_ends = 100 * kMs + 3 * QueryTracker::kMaxStampLagNs;
  (void)tracker.posted(kServe, stamped(30, 100 * kMs + 10), stall_ends);  // a worker's op, stamped after...
  (void)tracker.posted(kServe, arrived(4, 100 * kMs), stall_ends);       // ...the arrival, but read before it
  auto next = stamped(5, 100 * kMs + 20, ipc::OpKind::query_begin);
  next.arrived_ns = 100 * kMs;
  (void)tracker.posted(kServe, next, stall_ends);
  ASSERT_NE(tracker.open_query(kServe), nullptr);
  EXPECT_EQ(tracker.open_query(kServe)->started_ns, 100 * kMs + 20);
  const auto closed = tracker.posted(kServe, stamped(6, 102 * kMs, ipc::OpKind::query_end), stall_ends);
  ASSERT_EQ(closed.size(), 1u);
  EXPECT_EQ(closed[0].latency_ns(), 2 * kMs) << "its arrival to its end, not to when gpuqosd read the end";
}

// A server that queues requests says when each arrived: the query it begins next is the oldest
// waiting one, and counts from its arrival; the profile counts from its start.
TEST(QueryTracker, AQueryCountsFromItsRequestsArrival) {
  QueryTracker tracker;
  (void)tracker.posted(kServe, arrived(1, 1 * kMs), 1 * kMs);
  (void)tracker.posted(kServe, arrived(2, 3 * kMs), 3 * kMs + 10);  // the daemon reads it a little later
  EXPECT_EQ(tracker.open_query(kServe), nullptr) << "arrived, not begun";
  EXPECT_EQ(tracker.waiting_arrivals(kServe), (std::deque<std::int64_t>{1 * kMs, 3 * kMs}));
  (void)tracker.posted(kServe, begin(3, 1 * kMs), 5 * kMs);
  ASSERT_NE(tracker.open_query(kServe), nullptr);
  EXPECT_EQ(tracker.open_query(kServe)->opened_ns, 1 * kMs) << "the request it names";
  EXPECT_EQ(tracker.open_query(kServe)->started_ns, 5 * kMs);
  EXPECT_EQ(tracker.waiting_arrivals(kServe), (std::deque<std::int64_t>{3 * kMs}));
  (void)tracker.posted(kServe, op(4), 5 * kMs);
  (void)tracker.completed(kServe, done(4, 8 * kMs), 8 * kMs);
  const auto closed = tracker.posted(kServe, op(5, ipc::OpKind::query_end), 9 * kMs);
  ASSERT_EQ(closed.size(), 1u);
  EXPECT_EQ(closed[0].latency_ns(), 8 * kMs) << "arrival to end, the wait in the server's queue included";
  EXPECT_TRUE(closed[0].from_arrival);
  EXPECT_EQ(tracker.expected_query_ns(kServe), 4 * kMs) << "the profile is the work: start to end";
  (void)tracker.posted(kServe, begin(6, 3 * kMs), 10 * kMs);
  EXPECT_EQ(tracker.open_query(kServe)->opened_ns, 3 * kMs);
  EXPECT_EQ(tracker.expected_remaining_ns(kServe, 10 * kMs), 4 * kMs) << "counted from its start, not its arrival";
  EXPECT_EQ(tracker.expected_remaining_ns(kServe, 11 * kMs), 4 * kMs)
      << "its first op, which came at its start in the profile, has not come: 4 ms from there";
  EXPECT_TRUE(tracker.waiting_arrivals(kServe).empty());
  (void)tracker.posted(kServe, op(7, ipc::OpKind::query_end), 12 * kMs);
  (void)tracker.posted(kServe, begin(8, 0), 20 * kMs);
  EXPECT_EQ(tracker.open_query(kServe)->opened_ns, 20 * kMs) << "no request named: it arrives as it begins";
  const auto unnamed = tracker.posted(kServe, op(9, ipc::OpKind::query_end), 21 * kMs);
  ASSERT_EQ(unnamed.size(), 1u);
  EXPECT_FALSE(unnamed[0].from_arrival);
}

TEST(QueryTracker, ArrivalsAreNeverInTheFuture) {
  QueryTracker tracker;
  (void)tracker.posted(kServe, arrived(1, 9 * kMs), 2 * kMs);  // a stamp ahead of the daemon's clock
  EXPECT_EQ(tracker.waiting_arrivals(kServe), (std::deque<std::int64_t>{2 * kMs}));
  (void)tracker.posted(kServe, begin(2, 9 * kMs), 3 * kMs);
  EXPECT_EQ(tracker.open_query(kServe)->opened_ns, 3 * kMs);
  EXPECT_TRUE(tracker.waiting_arrivals(kServe).empty());
}

// The shim names the request each begin starts: a mark lost on the way (a full ring) costs one
// query its arrival, never the pairing of the next ones.
TEST(QueryTracker, ALostMarkCostsOneQueryNotThePairing) {
  QueryTracker tracker;
  (void)tracker.posted(kServe, arrived(1, 1 * kMs), 1 * kMs);
  (void)tracker.posted(kServe, arrived(2, 2 * kMs), 2 * kMs);
  (void)tracker.posted(kServe, arrived(3, 3 * kMs), 3 * kMs);
  // The begin of the first request was lost; its end closes nothing.
  EXPECT_TRUE(tracker.posted(kServe, op(4, ipc::OpKind::query_end), 4 * kMs).empty());
  (void)tracker.posted(kServe, begin(5, 2 * kMs), 5 * kMs);
  EXPECT_EQ(tracker.open_query(kServe)->opened_ns, 2 * kMs);
  EXPECT_EQ(tracker.waiting_arrivals(kServe), (std::deque<std::int64_t>{3 * kMs})) << "the first is gone too";
  // The end of the second is lost: the third's begin finds it open, so opens nothing, but its
  // request is no longer waiting.
  (void)tracker.posted(kServe, begin(6, 3 * kMs), 6 * kMs);
  EXPECT_EQ(tracker.open_query(kServe)->opened_ns, 2 * kMs);
  EXPECT_TRUE(tracker.waiting_arrivals(kServe).empty());
  // An arrival that reaches the daemon after the begin that took it is not waiting.
  (void)tracker.posted(kServe, op(7, ipc::OpKind::query_end), 7 * kMs);
  (void)tracker.posted(kServe, begin(8, 8 * kMs), 8 * kMs);
  (void)tracker.posted(kServe, arrived(9, 8 * kMs), 8 * kMs);
  EXPECT_TRUE(tracker.waiting_arrivals(kServe).empty());
  EXPECT_EQ(tracker.open_query(kServe)->opened_ns, 8 * kMs);
}

TEST(QueryTracker, AnArrivalSwitchesToMarks) {
  QueryTracker tracker;
  (void)tracker.posted(kServe, op(1), 0);
  ASSERT_NE(tracker.open_query(kServe), nullptr);
  (void)tracker.posted(kServe, arrived(2, 1 * kMs), 1 * kMs);
  EXPECT_EQ(tracker.open_query(kServe), nullptr) << "the inferred query is dropped";
  (void)tracker.posted(kServe, begin(3, 1 * kMs), 2 * kMs);
  (void)tracker.completed(kServe, done(1, 3 * kMs), 3 * kMs);
  EXPECT_TRUE(tracker.posted(kServe, op(4, ipc::OpKind::sync), 4 * kMs).empty()) << "syncs no longer close";
  EXPECT_NE(tracker.open_query(kServe), nullptr);
}

TEST(QueryTracker, RequestsThatNeverBeginAreDroppedAndCapped) {
  QueryTracker tracker;
  std::uint64_t seq = 0;
  for (std::size_t i = 0; i < QueryTracker::kMaxArrivals + 5; ++i) (void)tracker.posted(kServe, arrived(++seq, 1 * kMs), 1 * kMs);
  EXPECT_EQ(tracker.waiting_arrivals(kServe).size(), QueryTracker::kMaxArrivals);
  (void)tracker.posted(kServe, arrived(++seq, 4 * kMs), 4 * kMs);
  EXPECT_EQ(tracker.waiting_arrivals(kServe).size(), QueryTracker::kMaxArrivals);
  EXPECT_EQ(tracker.waiting_arrivals(kServe).back(), 4 * kMs) << "full: the oldest is forgotten, as in the shim";
  EXPECT_TRUE(tracker.expire(3 * kMs, 2 * kMs).empty());
  EXPECT_EQ(tracker.waiting_arrivals(kServe).size(), QueryTracker::kMaxArrivals) << "not stale yet";
  (void)tracker.expire(4 * kMs, 2 * kMs);
  EXPECT_EQ(tracker.waiting_arrivals(kServe), (std::deque<std::int64_t>{4 * kMs})) << "older than the stale age: gone";
  (void)tracker.posted(kServe, arrived(++seq, 5 * kMs), 5 * kMs);
  (void)tracker.posted(kServe, begin(++seq, 5 * kMs), 6 * kMs);
  EXPECT_EQ(tracker.open_query(kServe)->opened_ns, 5 * kMs);
  tracker.client_gone(kServe);
  EXPECT_TRUE(tracker.waiting_arrivals(kServe).empty());
}

// The arrival rate: the mean gap over the latest kRateWindow arrivals said, begun or not (a request
// that arrives after its begin counts too), once kMinRateArrivals have come.
TEST(QueryTracker, TheArrivalGapIsTheMeanOverTheLatestArrivals) {
  QueryTracker tracker;
  std::uint64_t seq = 0;
  for (std::size_t i = 0; i + 1 < QueryTracker::kMinRateArrivals; ++i) {
    const auto at = static_cast<std::int64_t>(i) * 10 * kMs;
    (void)tracker.posted(kServe, arrived(++seq, at), at);
  }
  EXPECT_EQ(tracker.mean_arrival_gap_ns(kServe), 0) << "one short of the minimum";
  std::int64_t at = static_cast<std::int64_t>(QueryTracker::kMinRateArrivals - 1) * 10 * kMs;
  (void)tracker.posted(kServe, begin(++seq, at), at);
  (void)tracker.posted(kServe, arrived(++seq, at), at);  // reaches the daemon after its begin
  EXPECT_EQ(tracker.mean_arrival_gap_ns(kServe), 10 * kMs);
  // A faster rate replaces the old one as the window moves on: after kRateWindow arrivals 2 ms
  // apart, none of the 10-ms gaps is left.
  for (std::size_t i = 0; i < QueryTracker::kRateWindow; ++i) {
    at += 2 * kMs;
    (void)tracker.posted(kServe, arrived(++seq, at), at);
  }
  EXPECT_EQ(tracker.mean_arrival_gap_ns(kServe), 2 * kMs);
  // Stamps from the future count as the daemon's now (as the arrivals themselves); stamps that do
  // not move forward say no rate.
  QueryTracker frozen;
  for (std::size_t i = 0; i < QueryTracker::kMinRateArrivals; ++i) (void)frozen.posted(kServe, arrived(i + 1, 50 * kMs), kMs);
  EXPECT_EQ(frozen.mean_arrival_gap_ns(kServe), 0);
  EXPECT_EQ(tracker.mean_arrival_gap_ns(kServe + 1), 0) << "a client never seen";
  tracker.client_gone(kServe);
  EXPECT_EQ(tracker.mean_arrival_gap_ns(kServe), 0) << "forgotten with the client";
}

// The wait each arrival would have had in the job's own queue with every query taking the
// profile's whole time (Lindley): arrivals before a profile are not counted, a burst queues, a gap
// longer than the queue empties it.
TEST(QueryTracker, EachArrivalsOwnQueueWaitIsKeptOnceThereIsAProfile) {
  QueryTracker tracker;
  std::uint64_t seq = 0;
  (void)tracker.posted(kServe, arrived(++seq, 0), 0);
  EXPECT_TRUE(tracker.queue_waits(kServe).empty()) << "no profile yet";
  (void)tracker.posted(kServe, begin(++seq, 0), 0);
  (void)tracker.posted(kServe, op(++seq), 0);
  (void)tracker.completed(kServe, done(seq, 10 * kMs), 10 * kMs);
  ASSERT_EQ(tracker.posted(kServe, op(++seq, ipc::OpKind::query_end), 10 * kMs).size(), 1u);
  ASSERT_EQ(tracker.expected_query_ns(kServe), 10 * kMs);
  // Three requests 2 ms apart (each waits for the one before it, less the gap), then one 40 ms
  // after the last (the queue of 16 + 10 ms has drained by then).
  for (const std::int64_t at : {100 * kMs, 102 * kMs, 104 * kMs, 144 * kMs}) (void)tracker.posted(kServe, arrived(++seq, at), at);
  EXPECT_EQ(tracker.queue_waits(kServe), (std::deque<std::int64_t>{0, 8 * kMs, 16 * kMs, 0}));
  EXPECT_EQ(tracker.queue_waits_kept(kServe), 4u);
  // Only the latest kQueueWaitWindow are kept.
  std::int64_t at = 144 * kMs;
  for (std::size_t i = 0; i < QueryTracker::kQueueWaitWindow; ++i) {
    at += 5 * kMs;
    (void)tracker.posted(kServe, arrived(++seq, at), at);
  }
  const auto& waits = tracker.queue_waits(kServe);
  ASSERT_EQ(waits.size(), QueryTracker::kQueueWaitWindow);
  EXPECT_EQ(waits.front(), 5 * kMs) << "the first of 5-ms gaps waited 10 - 5 ms; the burst is gone";
  EXPECT_EQ(waits.back(), static_cast<std::int64_t>(QueryTracker::kQueueWaitWindow) * 5 * kMs)
      << "a job whose arrivals outpace its queries queues for ever (10 - 5 ms more each)";
  EXPECT_EQ(tracker.queue_waits_kept(kServe), 4 + QueryTracker::kQueueWaitWindow) << "counts on past the window";
  EXPECT_EQ(tracker.queue_waits_kept(kServe + 1), 0u);
  EXPECT_TRUE(tracker.queue_waits(kServe + 1).empty()) << "a client never seen";
  tracker.client_gone(kServe);
  EXPECT_TRUE(tracker.queue_waits(kServe).empty()) << "forgotten with the client";
  EXPECT_EQ(tracker.queue_waits_kept(kServe), 0u);
}

// An arrival said on another thread (a server's receiving one) can reach the daemon after an op of
// the job stamped later: its wait counts from its own stamp, never from before the arrival said
// before it.
TEST(QueryTracker, AnArrivalReadAfterALaterStampedOpWaitsFromItsOwnStamp) {
  QueryTracker tracker;
  std::uint64_t seq = 0;
  (void)tracker.posted(kServe, arrived(++seq, 0), 0);
  (void)tracker.posted(kServe, begin(++seq, 0), 0);
  (void)tracker.posted(kServe, op(++seq), 0);
  (void)tracker.completed(kServe, done(seq, 10 * kMs), 10 * kMs);
  ASSERT_EQ(tracker.posted(kServe, op(++seq, ipc::OpKind::query_end), 10 * kMs).size(), 1u);
  (void)tracker.posted(kServe, arrived(++seq, 100 * kMs), 100 * kMs);
  ipc::OpDescriptor later = op(++seq);
  later.posted_ns = 105 * kMs;
  (void)tracker.posted(kServe, later, 105 * kMs);
  (void)tracker.posted(kServe, arrived(++seq, 102 * kMs), 106 * kMs);
  EXPECT_EQ(tracker.queue_waits(kServe), (std::deque<std::int64_t>{0, 8 * kMs})) << "10 - 2 ms, not 10 - 5";
  (void)tracker.posted(kServe, arrived(++seq, 101 * kMs), 107 * kMs);
  EXPECT_EQ(tracker.queue_waits(kServe), (std::deque<std::int64_t>{0, 8 * kMs, 18 * kMs}))
      << "out of order: taken as arriving with the one before it";
}

TEST(QueryTracker, TheProfileGivesTheRemainingTimeAfterEachOp) {
  QueryTracker tracker;
  // A query: op at 0, op at 2 ms, done at 5 ms.
  (void)tracker.posted(kServe, op(1), 0);
  (void)tracker.posted(kServe, op(2), 2 * kMs);
  (void)tracker.posted(kServe, op(3, ipc::OpKind::sync), 2 * kMs);
  (void)tracker.completed(kServe, done(1, 3 * kMs), 3 * kMs);
  (void)tracker.completed(kServe, done(2, 5 * kMs), 5 * kMs);
  EXPECT_EQ(tracker.expected_query_ns(kServe), 5 * kMs);
  (void)tracker.posted(kServe, op(4), 10 * kMs);
  EXPECT_EQ(tracker.expected_remaining_ns(kServe, 10 * kMs), 5 * kMs);
  EXPECT_EQ(tracker.expected_remaining_ns(kServe, 11 * kMs), 4 * kMs);
  EXPECT_EQ(tracker.expected_remaining_ns(kServe, 14 * kMs), 3 * kMs)
      << "late: its second op has not come, and the profile has 3 ms from there (not 1 ms)";
  (void)tracker.posted(kServe, op(5), 14 * kMs);
  EXPECT_EQ(tracker.expected_remaining_ns(kServe, 14 * kMs), 3 * kMs) << "after the second op: 3 ms";
  EXPECT_EQ(tracker.expected_remaining_ns(kServe, 22 * kMs), 0) << "overdue after its last op: nothing expected";
}

// A query: a pageable input copy at 0 (the program waits for it), kernels at 1 and 2 ms, a
// pageable output copy at 6 ms, the sync at 7 ms, done at 8 ms. After the copy in, the program next
// waits at the copy out.
TEST(QueryTracker, TheProfileGivesTheTimeToTheNextBlockingPoint) {
  QueryTracker tracker;
  ipc::OpDescriptor in = op(1, ipc::OpKind::copy);
  in.direction = ipc::CopyDirection::h2d;
  in.host_memory = ipc::HostMemory::pageable;
  ipc::OpDescriptor out = op(4, ipc::OpKind::copy);
  out.direction = ipc::CopyDirection::d2h;
  out.host_memory = ipc::HostMemory::pageable;
  const auto run_query = [&](std::int64_t at, std::uint64_t seq0) {
    in.seq = seq0 + 1;
    out.seq = seq0 + 4;
    (void)tracker.posted(kServe, in, at);
    (void)tracker.posted(kServe, op(seq0 + 2), at + 1 * kMs);
    (void)tracker.posted(kServe, op(seq0 + 3), at + 2 * kMs);
    (void)tracker.posted(kServe, out, at + 6 * kMs);
    (void)tracker.posted(kServe, op(seq0 + 5, ipc::OpKind::sync), at + 7 * kMs);
    for (std::uint64_t s = seq0 + 1; s <= seq0 + 4; ++s) (void)tracker.completed(kServe, done(s, at + 8 * kMs), at + 8 * kMs);
  };
  run_query(0, 0);
  ASSERT_EQ(tracker.open_query(kServe), nullptr);
  EXPECT_EQ(tracker.expected_unblocked_ns(kServe, 20 * kMs), 0) << "no open query";
  EXPECT_EQ(tracker.expected_blocking_points(kServe), 0) << "no open query";
  EXPECT_EQ(tracker.expected_query_blocking_points(kServe), 3) << "copy in, copy out, the sync";
  in.seq = 6;
  (void)tracker.posted(kServe, in, 20 * kMs);
  EXPECT_EQ(tracker.expected_blocking_points(kServe), 3) << "after the copy in: all three still to come";
  EXPECT_LE(tracker.expected_unblocked_ns(kServe, 20 * kMs), 1) << "the copy in blocks at once (1 ns: 0 is unlearned)";
  EXPECT_EQ(tracker.expected_remaining_ns(kServe, 20 * kMs), 8 * kMs);
  (void)tracker.posted(kServe, op(7), 21 * kMs);
  EXPECT_EQ(tracker.expected_unblocked_ns(kServe, 21 * kMs), 5 * kMs) << "the copy out at 6 ms";
  EXPECT_EQ(tracker.expected_blocking_points(kServe), 2) << "the copy out and the sync";
  EXPECT_EQ(tracker.expected_unblocked_ns(kServe, 23 * kMs), 3 * kMs);
  EXPECT_EQ(tracker.expected_remaining_ns(kServe, 21 * kMs), 7 * kMs);
  // Kernels, pinned copies and memsets are not blocking points: a query of only those blocks at
  // its sync.
  QueryTracker plain;
  (void)plain.posted(kServe, op(1), 0);
  (void)plain.posted(kServe, op(2, ipc::OpKind::memset), 1 * kMs);
  (void)plain.posted(kServe, op(3, ipc::OpKind::sync), 4 * kMs);
  (void)plain.completed(kServe, done(1, 5 * kMs), 5 * kMs);
  (void)plain.completed(kServe, done(2, 5 * kMs), 5 * kMs);
  (void)plain.posted(kServe, op(4), 10 * kMs);
  EXPECT_EQ(plain.expected_unblocked_ns(kServe, 10 * kMs), 4 * kMs);
  EXPECT_EQ(plain.expected_blocking_points(kServe), 1) << "the sync";
  EXPECT_EQ(plain.expected_remaining_ns(kServe, 10 * kMs), 5 * kMs);
}

// The next query's first op, a pageable copy, arrives before the completion that closes the
// previous query: carried into the next query, it is still its blocking point.
TEST(QueryTracker, AnOpCarriedIntoTheNextQueryKeepsItsBlockingPoint) {
  QueryTracker tracker;
  (void)tracker.posted(kServe, op(1), 0);
  (void)tracker.posted(kServe, op(2, ipc::OpKind::sync), 1 * kMs);
  ipc::OpDescriptor in = op(3, ipc::OpKind::copy);
  in.direction = ipc::CopyDirection::h2d;
  in.host_memory = ipc::HostMemory::pageable;
  (void)tracker.posted(kServe, in, 3 * kMs);
  (void)tracker.posted(kServe, op(4), 4 * kMs);
  ASSERT_EQ(tracker.completed(kServe, done(1, 2 * kMs), 5 * kMs).size(), 1u);
  ASSERT_NE(tracker.open_query(kServe), nullptr) << "the carried ops opened the next query";
  (void)tracker.posted(kServe, op(5, ipc::OpKind::sync), 9 * kMs);
  (void)tracker.completed(kServe, done(3, 6 * kMs), 6 * kMs);
  ASSERT_EQ(tracker.completed(kServe, done(4, 10 * kMs), 10 * kMs).size(), 1u);
  ipc::OpDescriptor next = in;
  next.seq = 6;
  (void)tracker.posted(kServe, next, 20 * kMs);
  // After the first op: 1 ms in the first query, 0 in the second (falls halfway); had the copy lost
  // its blocking point, the second would have taught 6 ms (to the sync) and it would have risen.
  EXPECT_EQ(tracker.expected_unblocked_ns(kServe, 20 * kMs), kMs / 2 + 1);
  (void)tracker.posted(kServe, op(7), 21 * kMs);
  EXPECT_EQ(tracker.expected_unblocked_ns(kServe, 21 * kMs), 5 * kMs) << "the sync, 5 ms after op 4";
}

TEST(QueryTracker, TheProfileFallsFastAndRisesSlowly) {
  QueryTracker tracker;
  std::uint64_t seq = 0;
  std::int64_t now = 0;
  const auto run_query = [&](std::int64_t length) {
    (void)tracker.posted(kServe, op(++seq), now);
    const std::uint64_t work = seq;
    (void)tracker.posted(kServe, op(++seq, ipc::OpKind::sync), now);
    (void)tracker.completed(kServe, done(work, now + length), now + length);
    now += length + kMs;
  };
  run_query(4 * kMs);
  run_query(20 * kMs);  // delayed by best-effort work: the policy accounts for that itself
  EXPECT_EQ(tracker.expected_query_ns(kServe), 5 * kMs) << "a sixteenth of the way up";
  run_query(3 * kMs);
  EXPECT_EQ(tracker.expected_query_ns(kServe), 4 * kMs) << "halfway down";
}

// On a time-slicing device each blocking point can wait for a slice: the count errs high, rising
// at once to a query that waited more often and falling slowly.
TEST(QueryTracker, TheBlockingPointCountRisesAtOnceAndFallsSlowly) {
  QueryTracker tracker;
  std::uint64_t seq = 0;
  std::int64_t now = 0;
  const auto run_query = [&](int pageable_copies) {
    (void)tracker.posted(kServe, op(++seq), now);
    std::vector<std::uint64_t> work{seq};
    for (int i = 0; i < pageable_copies; ++i) {
      ipc::OpDescriptor copy = op(++seq, ipc::OpKind::copy);
      copy.direction = ipc::CopyDirection::d2h;
      copy.host_memory = ipc::HostMemory::pageable;
      (void)tracker.posted(kServe, copy, now + (i + 1) * kMs);
      work.push_back(seq);
    }
    (void)tracker.posted(kServe, op(++seq, ipc::OpKind::sync), now + 5 * kMs);
    for (std::uint64_t s : work) (void)tracker.completed(kServe, done(s, now + 6 * kMs), now + 6 * kMs);
    now += 10 * kMs;
  };
  EXPECT_EQ(tracker.expected_query_blocking_points(kServe), 1) << "none closed yet: the end";
  run_query(0);
  EXPECT_EQ(tracker.expected_query_blocking_points(kServe), 1);
  run_query(2);
  EXPECT_EQ(tracker.expected_query_blocking_points(kServe), 3) << "at once";
  run_query(0);
  EXPECT_DOUBLE_EQ(tracker.expected_query_blocking_points(kServe), 3 - 2.0 / 16) << "a sixteenth of the way down";
  (void)tracker.posted(kServe, op(++seq), now);
  EXPECT_DOUBLE_EQ(tracker.expected_blocking_points(kServe), 3 - 2.0 / 16) << "after the first op: the same";
}

// A client gone ends its unfinished queries: an open marked one, and inferred ones the program had
// synchronised on. Work it posted and never waited for (the async tail of a program that exits) is
// no request: a review found a clean exit counted as an abandoned query.
TEST(QueryTracker, AClientGoneCountsTheQueriesItLeftUnfinished) {
  QueryTracker tracker;
  EXPECT_EQ(tracker.client_gone(kServe), 0u) << "never seen";
  (void)tracker.posted(kServe, op(1), 0);
  EXPECT_EQ(tracker.client_gone(kServe), 0u) << "never synchronised on";
  (void)tracker.posted(kServe, op(1), 0);
  (void)tracker.posted(kServe, op(2, ipc::OpKind::sync), 0);
  EXPECT_EQ(tracker.client_gone(kServe), 1u) << "waited for, not drained";
  (void)tracker.posted(kServe, op(1), 0);
  (void)tracker.posted(kServe, op(2, ipc::OpKind::sync), 0);
  (void)tracker.posted(kServe, op(3), 0);
  (void)tracker.posted(kServe, op(4, ipc::OpKind::sync), 0);
  (void)tracker.posted(kServe, op(5), 0);
  EXPECT_EQ(tracker.client_gone(kServe), 2u) << "the open one and the one behind its mark; not op 5";
  // Past kMaxLater behind the mark, the newest takes in what follows: still a query waited for.
  std::uint64_t seq = 1;
  (void)tracker.posted(kServe, op(seq), 0);
  for (std::size_t i = 0; i < QueryTracker::kMaxLater + 2; ++i) {
    (void)tracker.posted(kServe, op(++seq, ipc::OpKind::sync), 0);
    (void)tracker.posted(kServe, op(++seq), 0);
  }
  EXPECT_EQ(tracker.client_gone(kServe), 1 + QueryTracker::kMaxLater) << "a review: the newest was not counted";
  // Nor once the queries before it closed and it is the open one, its sync_seq still cleared.
  seq = 1;
  (void)tracker.posted(kServe, op(seq), 0);
  for (std::size_t i = 0; i < QueryTracker::kMaxLater + 2; ++i) {
    (void)tracker.posted(kServe, op(++seq, ipc::OpKind::sync), 0);
    (void)tracker.posted(kServe, op(++seq), 0);
  }
  std::size_t closed = tracker.completed(kServe, done(1, kMs), kMs).size();
  for (std::uint64_t s = 3; s + 2 < seq; s += 2) closed += tracker.completed(kServe, done(s, kMs), kMs).size();
  EXPECT_EQ(closed, QueryTracker::kMaxLater) << "the open one and all behind it but the newest";
  ASSERT_NE(tracker.open_query(kServe), nullptr);
  EXPECT_EQ(tracker.client_gone(kServe), 1u) << "the newest, open now: waited for";
  (void)tracker.posted(kServe, begin(1, 0), 0);
  (void)tracker.posted(kServe, op(2), 0);
  EXPECT_EQ(tracker.client_gone(kServe), 1u) << "a marked query open";
  (void)tracker.posted(kServe, op(1), 0);
  (void)tracker.posted(kServe, op(2, ipc::OpKind::sync), 0);
  ASSERT_EQ(tracker.completed(kServe, done(1, kMs), kMs).size(), 1u);
  EXPECT_EQ(tracker.client_gone(kServe), 0u) << "its query closed";
}

TEST(QueryTracker, AQueryWhoseCompletionsNeverComeExpires) {
  QueryTracker tracker;
  (void)tracker.posted(kServe, op(1), 0);
  (void)tracker.posted(kServe, op(2, ipc::OpKind::sync), 0);
  EXPECT_TRUE(tracker.expire(1 * kMs, 2 * kMs).empty());
  EXPECT_EQ(tracker.expire(3 * kMs, 2 * kMs), (std::vector<AbandonedQueries>{{kServe, 1}}));
  EXPECT_EQ(tracker.open_query(kServe), nullptr);
  EXPECT_EQ(tracker.outstanding_ops(kServe), 0u);
  // Work never synchronised on is forgotten the same way, and not counted: it was no request.
  (void)tracker.posted(kServe, op(3), 4 * kMs);
  EXPECT_TRUE(tracker.expire(7 * kMs, 2 * kMs).empty());
  EXPECT_EQ(tracker.open_query(kServe), nullptr);
  EXPECT_EQ(tracker.outstanding_ops(kServe), 0u);
}

// Completions can be lost (a full ring, a shim out of memory). An inferred query waiting on one is
// abandoned 2 s after its latest op anyway; but ops outside any marked query were kept for ever,
// and a query that keeps receiving ops (no closing sync yet) never went idle.
TEST(QueryTracker, OpsWhoseCompletionsWereLostAreForgottenAfterTheLostAge) {
  constexpr std::int64_t kLost = QueryTracker::kLostCompletionNs;
  constexpr std::int64_t kAge = 2 * kMs;  // the idle age: far below kLost
  QueryTracker marked;
  (void)marked.posted(kServe, op(1, ipc::OpKind::query_begin), 0);
  (void)marked.posted(kServe, op(2, ipc::OpKind::query_end), 0);
  for (std::uint64_t seq = 3; seq < 103; ++seq) {  // work outside any query, its completions lost
    (void)marked.posted(kServe, op(seq), static_cast<std::int64_t>(seq) * kMs);
  }
  EXPECT_TRUE(marked.expire(kLost + 2 * kMs, kAge).empty());
  EXPECT_EQ(marked.outstanding_ops(kServe), 100u) << "none older than " << kLost;
  EXPECT_TRUE(marked.expire(kLost + 50 * kMs + 1, kAge).empty()) << "no query open to abandon";
  EXPECT_EQ(marked.outstanding_ops(kServe), 52u) << "those posted at 3..50 ms are forgotten";

  QueryTracker inferred;
  (void)inferred.posted(kServe, op(1), 0);  // its completion is lost; no sync yet
  std::uint64_t seq = 1;
  for (std::int64_t t = kMs; t <= kLost; t += kMs * 500) {  // the query goes on: ops, all completed
    (void)inferred.posted(kServe, op(++seq), t);
    (void)inferred.completed(kServe, done(seq, t + 10), t + 10);
    EXPECT_TRUE(inferred.expire(t + 20, kAge).empty()) << "a long op, not a lost one, until " << kLost;
  }
  (void)inferred.posted(kServe, op(++seq), kLost + kMs);
  EXPECT_TRUE(inferred.expire(kLost + kMs, kAge).empty()) << "forgotten; not counted, never synchronised on";
  EXPECT_EQ(inferred.open_query(kServe), nullptr);
  EXPECT_EQ(inferred.outstanding_ops(kServe), 0u);
}

// A client that never reports completions is bounded by count too, not only by kLostCompletionNs: it
// could post millions of ops within it. Its oldest are forgotten, and a query still closes.
TEST(QueryTracker, AClientsOutstandingOpsAreBoundedInCount) {
  constexpr std::size_t kMax = QueryTracker::kMaxOutstandingOps;
  QueryTracker tracker;
  for (std::uint64_t seq = 1; seq <= kMax + 100; ++seq) (void)tracker.posted(kServe, op(seq), 1 * kMs);
  EXPECT_EQ(tracker.outstanding_ops(kServe), kMax);
  (void)tracker.posted(kServe, op(kMax + 101, ipc::OpKind::sync), 2 * kMs);
  std::vector<ClosedQuery> closed;
  for (std::uint64_t seq = 101; seq <= kMax + 100; ++seq) closed = tracker.completed(kServe, done(seq, 3 * kMs), 3 * kMs);
  ASSERT_EQ(closed.size(), 1u) << "ops 1..100 were forgotten: the query drained with the rest";
  EXPECT_EQ(tracker.outstanding_ops(kServe), 0u);
  // Before it drains, an inferred query that lost an op so is abandoned at the next expire, as one
  // whose completion was lost: its latency would be learned without that op.
  QueryTracker open;
  for (std::uint64_t seq = 1; seq <= kMax + 1; ++seq) (void)open.posted(kServe, op(seq), 1 * kMs);
  (void)open.posted(kServe, op(kMax + 2, ipc::OpKind::sync), 1 * kMs);
  EXPECT_EQ(open.expire(2 * kMs, 1'000 * kMs), (std::vector<AbandonedQueries>{{kServe, 1}}));
  EXPECT_EQ(open.open_query(kServe), nullptr);
}

TEST(QueryTracker, MarksAndUnknownCompletionsOfOtherClientsAreIgnored) {
  QueryTracker tracker;
  EXPECT_TRUE(tracker.completed(7, done(1, kMs), kMs).empty());
  EXPECT_TRUE(tracker.posted(kServe, op(1, ipc::OpKind::sync), kMs).empty());
  EXPECT_EQ(tracker.open_query(kServe), nullptr) << "a sync opens nothing";
}

}  // namespace
}  // namespace gpuqos::scheduler
