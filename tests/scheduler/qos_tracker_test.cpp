// Tests of the QoS tracker: histogram percentiles against a sorted-array reference, violations,
// meets_target, the best-effort window, job bookkeeping (reconnects, the bound on jobs).
#include "gpuqos/scheduler/qos_tracker.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

namespace gpuqos::scheduler {
namespace {

constexpr std::int64_t kMs = 1'000'000;
constexpr std::int64_t kS = 1'000'000'000;

config::Config config_with(const std::string& job, std::optional<double> target_ms, double percentile = 99.0) {
  config::Config config = config::default_config();
  config::JobConfig entry;
  entry.name = job;
  entry.target_ms = target_ms;
  entry.percentile = percentile;
  config.jobs.push_back(entry);
  return config;
}

ipc::CompletionDescriptor ran(std::uint64_t seq, std::int64_t start_ns, std::int64_t end_ns,
                              std::uint32_t flags = ipc::kCompletionExact) {
  return ipc::CompletionDescriptor{seq, start_ns, end_ns, 0, flags};
}

void expect_percentiles_within_error(std::vector<std::int64_t> values, const std::string& what) {
  LatencyHistogram histogram;
  for (const std::int64_t v : values) histogram.record(v);
  std::sort(values.begin(), values.end());
  ASSERT_EQ(histogram.count(), values.size());
  EXPECT_EQ(histogram.max_ns(), values.back()) << what;
  EXPECT_EQ(histogram.min_ns(), values.front()) << what;
  for (const double p : {1.0, 10.0, 50.0, 90.0, 99.0, 99.9, 99.99, 100.0}) {
    const std::int64_t exact = values[LatencyHistogram::rank_for(p, values.size()) - 1];
    const std::int64_t approximate = histogram.percentile_ns(p);
    EXPECT_LE(std::abs(static_cast<double>(approximate - exact)), static_cast<double>(exact) / 64 + 0.5)
        << what << " p" << p << ": exact " << exact << ", histogram " << approximate;
  }
}

TEST(LatencyHistogram, PercentilesAreWithinOneSixtyFourthOfASortedArraysOverRandomData) {
  std::mt19937_64 random(20240611);
  std::vector<std::int64_t> log_uniform, normal, two_modes;
  std::uniform_real_distribution<double> exponent(3.0, 11.0);  // 1 us to 100 s
  std::normal_distribution<double> around_5ms(5.0 * kMs, 0.7 * kMs);
  std::bernoulli_distribution slow(0.02);
  for (int i = 0; i < 100'000; ++i) {
    log_uniform.push_back(static_cast<std::int64_t>(std::pow(10.0, exponent(random))));
    normal.push_back(std::max<std::int64_t>(1, static_cast<std::int64_t>(around_5ms(random))));
    two_modes.push_back(slow(random) ? 40 * kMs + static_cast<std::int64_t>(random() % kMs)
                                     : 2 * kMs + static_cast<std::int64_t>(random() % (kMs / 4)));
  }
  expect_percentiles_within_error(log_uniform, "log-uniform 1 us..100 s");
  expect_percentiles_within_error(normal, "normal around 5 ms");
  expect_percentiles_within_error(two_modes, "2 ms with a 2% tail at 40 ms");
  expect_percentiles_within_error({7}, "one value");
  expect_percentiles_within_error({0, 1, 2, 31, 32, 33, 63, 64, 65}, "small exact values");
}

// The fixed bounds of the Prometheus histogram count exactly: a value at a bound is within it
// (`le`), one nanosecond more is not; beyond the last bound only the total counts it.
TEST(LatencyHistogram, CountsAtTheFixedBoundsAreExactAndCumulative) {
  LatencyHistogram histogram;
  for (const std::int64_t ns : {std::int64_t{0}, std::int64_t{5'000'000}, std::int64_t{5'000'001}, std::int64_t{9'999'999},
                                std::int64_t{10'000'000}, std::int64_t{20'000'000'000}}) {
    histogram.record(ns);
  }
  const auto at_most = [&](std::int64_t bound_ns) {
    const auto& bounds = LatencyHistogram::kLeBoundsNs;
    const auto it = std::find(bounds.begin(), bounds.end(), bound_ns);
    EXPECT_NE(it, bounds.end()) << bound_ns;
    return histogram.count_at_most(static_cast<std::size_t>(it - bounds.begin()));
  };
  EXPECT_EQ(at_most(100'000), 1u);
  EXPECT_EQ(at_most(2'500'000), 1u);
  EXPECT_EQ(at_most(5'000'000), 2u) << "5 ms is within le=0.005";
  EXPECT_EQ(at_most(10'000'000), 5u) << "5 ms + 1 ns, 10 ms - 1 ns and 10 ms";
  EXPECT_EQ(at_most(10'000'000'000), 5u) << "20 s is past every bound";
  EXPECT_EQ(histogram.count(), 6u);
}

TEST(LatencyHistogram, BucketsTileTheRangeWithoutGaps) {
  for (std::size_t bucket = 1; bucket < LatencyHistogram::kBucketCount; ++bucket) {
    ASSERT_EQ(LatencyHistogram::bucket_low_ns(bucket), LatencyHistogram::bucket_high_ns(bucket - 1) + 1) << bucket;
    ASSERT_EQ(LatencyHistogram::bucket_of(LatencyHistogram::bucket_low_ns(bucket)), bucket);
    ASSERT_EQ(LatencyHistogram::bucket_of(LatencyHistogram::bucket_high_ns(bucket)), bucket);
  }
  EXPECT_EQ(LatencyHistogram::bucket_of(-5), 0u);
  EXPECT_EQ(LatencyHistogram::bucket_of(std::int64_t{1} << 40), LatencyHistogram::kBucketCount - 1) << "clamped";
}

TEST(LatencyHistogram, EmptyHasZerosAndHugeValuesKeepAnExactMax) {
  LatencyHistogram histogram;
  EXPECT_EQ(histogram.percentile_ns(99), 0);
  EXPECT_EQ(histogram.mean_ns(), 0.0);
  histogram.record(500 * kS);
  histogram.record(1 * kMs);
  EXPECT_EQ(histogram.max_ns(), 500 * kS);
  EXPECT_EQ(histogram.percentile_ns(100), 500 * kS) << "clamped to the max, not the top bucket's middle";
  EXPECT_EQ(histogram.count(), 2u);
  EXPECT_DOUBLE_EQ(histogram.mean_ns(), (500.0 * kS + kMs) / 2);
}

TEST(LatencyHistogram, NearestRank) {
  EXPECT_EQ(LatencyHistogram::rank_for(99, 100), 99u);
  EXPECT_EQ(LatencyHistogram::rank_for(99.9, 1000), 999u);
  EXPECT_EQ(LatencyHistogram::rank_for(99.9, 10'000), 9990u);
  EXPECT_EQ(LatencyHistogram::rank_for(50, 3), 2u);
  EXPECT_EQ(LatencyHistogram::rank_for(0.001, 3), 1u);
  EXPECT_EQ(LatencyHistogram::rank_for(100, 3), 3u);
  EXPECT_EQ(LatencyHistogram::rank_for(99, 0), 0u);
}

// A tight target is logged when tight now and at 5 of the last 10 checks: not at the first checks
// (an untrained predictor), not for a blip, and for one that hovers at the threshold too (which
// "tight at every check for 5 s" never logged). Each key is judged on its own.
TEST(TightTargetWatch, LogsATargetTightNowAndAtHalfTheLastTenChecks) {
  using Key = TightTargetWatch::Key;
  const Key serve{"serve", 0}, other_gpu{"serve", 1};
  const auto run = [](TightTargetWatch& watch, const std::string& pattern, const std::vector<Key>& keys) {
    std::string logged;  // one character a check: 'L' logged, '.' not
    for (const char tight : pattern) {
      const auto log = watch.check(tight == 'x' ? keys : std::vector<Key>{});
      EXPECT_TRUE(log.empty() || log == keys);
      logged += log.empty() ? '.' : 'L';
    }
    return logged;
  };
  struct Case {
    const char* tight;   // one character a check: 'x' tight, '.' not
    const char* logged;  // 'L' logged at that check
    const char* why;
  };
  for (const Case& c : {Case{"xxxxxxx", "....LLL", "tight from the start: at the 5th check"},
                        Case{"xx.......xx", "...........", "two blips, nine checks apart"},
                        Case{"x.x.x.x.x.x", "........L.L", "hovering: tight every other check"},
                        Case{"xxxx..........xxxx", "..................", "forgotten after 10 checks"},
                        Case{"xxxx.....x", ".........L", "the first check still in the window of 10"},
                        Case{"xxxx......x", "...........", "the first check just out of it"}}) {
    TightTargetWatch watch;
    EXPECT_EQ(run(watch, c.tight, {serve}), c.logged) << c.why;
  }
  TightTargetWatch watch;
  EXPECT_EQ(run(watch, "xxxx", {serve, other_gpu}), "....");
  EXPECT_EQ(run(watch, "x", {serve}), "L") << "serve on GPU 0 only";
  EXPECT_EQ(watch.check({other_gpu}), std::vector<Key>{other_gpu}) << "its own history: 5 of the last 10";
}

TEST(QosTracker, CountsViolationsAndTellsWhetherTheJobMeetsItsTarget) {
  const config::Config config = config_with("serve", 6.0, 90.0);
  QosTracker tracker;
  tracker.client_seen(1, "serve", ipc::Priority::high, 0);
  for (int i = 0; i < 95; ++i) tracker.query_closed(1, 3 * kMs, 6 * kMs, i * kMs);
  for (int i = 0; i < 5; ++i) tracker.query_closed(1, 9 * kMs, 6 * kMs, 100 * kMs);
  tracker.query_closed(1, 6 * kMs, 6 * kMs, 100 * kMs);  // exactly at the target: not a violation
  auto jobs = tracker.snapshot(config, 200 * kMs);
  ASSERT_EQ(jobs.size(), 1u);
  const JobQosSnapshot& serve = jobs[0];
  EXPECT_EQ(serve.job, "serve");
  EXPECT_EQ(serve.priority, ipc::Priority::high);
  EXPECT_EQ(serve.clients, 1u);
  EXPECT_EQ(serve.queries, 101u);
  EXPECT_EQ(serve.violations, 5u);
  EXPECT_NEAR(serve.violation_fraction, 5.0 / 101, 1e-12);
  ASSERT_TRUE(serve.target_ns);
  EXPECT_EQ(*serve.target_ns, 6 * kMs);
  EXPECT_EQ(serve.percentile, 90.0);
  EXPECT_NEAR(static_cast<double>(serve.at_percentile_ns), 3.0 * kMs, 3.0 * kMs / 64);
  ASSERT_TRUE(serve.meets_target);
  EXPECT_TRUE(*serve.meets_target) << "p90 is 3 ms";
  EXPECT_NEAR(static_cast<double>(serve.p99_ns), 9.0 * kMs, 9.0 * kMs / 64);
  EXPECT_EQ(serve.max_ns, 9 * kMs);

  // The same numbers against p99 <= 6 ms: over.
  jobs = tracker.snapshot(config_with("serve", 6.0, 99.0), 200 * kMs);
  ASSERT_TRUE(jobs[0].meets_target);
  EXPECT_FALSE(*jobs[0].meets_target);
  // Without a target: nothing to meet (and queries are still measured).
  jobs = tracker.snapshot(config::default_config(), 200 * kMs);
  EXPECT_FALSE(jobs[0].target_ns);
  EXPECT_FALSE(jobs[0].meets_target);
  EXPECT_EQ(jobs[0].queries, 101u);
}

// A job that begins to say its requests' arrivals mid-run: its latencies from then on count from
// them (longer: they include the wait in the program's queue), so they start a histogram of their
// own rather than mix with the ones measured from each query's first GPU op.
// The verdict counts the queries over the target: the percentile's latency is its bucket's middle,
// and a job 89 % over a p99 target just above that middle read "ok" (an audit). The latency shown
// stays on the verdict's side of the target, within its bucket.
TEST(QosTracker, TheVerdictCountsTheQueriesOverTheTarget) {
  const std::size_t bucket = LatencyHistogram::bucket_of(20 * kMs);
  const std::int64_t low = LatencyHistogram::bucket_low_ns(bucket), high = LatencyHistogram::bucket_high_ns(bucket);
  const std::int64_t middle = low + (high - low) / 2;
  ASSERT_GT(high - middle, 2);
  for (const bool over : {true, false}) {
    SCOPED_TRACE(over);
    // Over: a target just above the bucket's middle, 89 queries just over it and 11 at the bucket's
    // bottom. Under: a target just below the middle, 99 queries at it and one at the bucket's top.
    const std::int64_t target = over ? middle + 1 : middle - 2;
    QosTracker tracker;
    tracker.client_seen(1, "serve", ipc::Priority::high, 0);
    const config::Config config = config_with("serve", static_cast<double>(target) / kMs, 99.0);
    const std::optional<std::int64_t> target_ns = QosTracker::target_of(config, "serve");
    ASSERT_EQ(target_ns, target);
    for (int i = 0; i < 100; ++i) {
      const std::int64_t latency = over ? (i < 11 ? low : *target_ns + 1) : (i == 0 ? high : *target_ns);
      tracker.query_closed(1, latency, target_ns, kMs);
    }
    const JobQosSnapshot serve = tracker.snapshot(config, 2 * kMs).at(0);
    EXPECT_EQ(serve.violations, over ? 89u : 1u);
    ASSERT_TRUE(serve.meets_target);
    EXPECT_EQ(*serve.meets_target, !over);
    EXPECT_GE(serve.at_percentile_ns, low);
    EXPECT_LE(serve.at_percentile_ns, high);
    if (over) {
      EXPECT_GT(serve.at_percentile_ns, *target_ns);
      EXPECT_GT(serve.p99_ns, *target_ns) << "the p99 column says the same";
      EXPECT_GT(serve.p999_ns, *target_ns) << "and the p99.9 (a review: its bucket's middle read under the target)";
    } else {
      EXPECT_LE(serve.at_percentile_ns, *target_ns);
      EXPECT_LE(serve.p90_ns, *target_ns) << "and the p90, in the same bucket";
    }
    EXPECT_LE(serve.p50_ns, serve.p90_ns);
    EXPECT_LE(serve.p90_ns, serve.p99_ns);
    EXPECT_LE(serve.p99_ns, serve.p999_ns);
  }
  // One query over in 100 meets p99; two do not.
  QosTracker tracker;
  tracker.client_seen(1, "serve", ipc::Priority::high, 0);
  const config::Config config = config_with("serve", 10.0, 99.0);
  for (int i = 0; i < 98; ++i) tracker.query_closed(1, 5 * kMs, 10 * kMs, kMs);
  tracker.query_closed(1, 11 * kMs, 10 * kMs, kMs);
  tracker.query_closed(1, 5 * kMs, 10 * kMs, kMs);
  EXPECT_TRUE(*tracker.snapshot(config, 2 * kMs).at(0).meets_target);
  tracker.query_closed(1, 11 * kMs, 10 * kMs, kMs);
  EXPECT_FALSE(*tracker.snapshot(config, 2 * kMs).at(0).meets_target) << "101 queries: p99 is the 100th, 11 ms";
}

TEST(QosTracker, AJobThatBeginsToSayItsArrivalsStartsItsLatenciesOver) {
  const config::Config config = config_with("serve", 6.0, 99.0);
  QosTracker tracker;
  tracker.client_seen(1, "serve", ipc::Priority::high, 0);
  for (int i = 0; i < 10; ++i) EXPECT_EQ(tracker.query_closed(1, 3 * kMs, 6 * kMs, i * kMs).dropped, 0u);
  EXPECT_EQ(tracker.query_closed(1, 7 * kMs, 6 * kMs, 10 * kMs).dropped, 0u);
  const QosTracker::StartedOver over = tracker.query_closed(1, 5 * kMs, 6 * kMs, 20 * kMs, LatencyFrom::arrival);
  EXPECT_EQ(over.dropped, 11u) << "dropped";
  EXPECT_FALSE(over.target_changed);
  EXPECT_EQ(over.from, LatencyFrom::arrival);
  EXPECT_EQ(tracker.query_closed(1, 5 * kMs, 6 * kMs, 30 * kMs, LatencyFrom::arrival).dropped, 0u) << "once";
  EXPECT_EQ(tracker.query_closed(1, 2 * kMs, 6 * kMs, 40 * kMs, LatencyFrom::begin).dropped, 0u)
      << "a marked query whose arrival was lost: kept";
  const auto jobs = tracker.snapshot(config, 50 * kMs);
  ASSERT_EQ(jobs.size(), 1u);
  EXPECT_EQ(jobs[0].queries, 3u);
  EXPECT_EQ(jobs[0].violations, 0u) << "the one over was measured the other way";
  EXPECT_EQ(jobs[0].max_ns, 5 * kMs);
}

// Job "serve" of two high-priority processes: 1 marks its queries (one of 4 ms closed at 1 ms), 2
// does not.
QosTracker job_of_two_processes_one_marking() {
  QosTracker tracker;
  tracker.client_seen(1, "serve", ipc::Priority::high, 0);
  tracker.client_seen(2, "serve", ipc::Priority::high, 0);
  (void)tracker.query_closed(1, 4 * kMs, 6 * kMs, 1 * kMs, LatencyFrom::begin);
  return tracker;
}

// A query measured from an earlier point than the job's latencies run from (another process of the
// job does not mark) is left out, not recorded among them as if it were of their kind (a review);
// queries that never closed are counted apart, and kept when the latencies start over.
TEST(QosTracker, AQueryOfAnEarlierKindIsLeftOutAndAbandonedOnesAreCounted) {
  const config::Config config = config_with("serve", 6.0, 99.0);
  QosTracker tracker = job_of_two_processes_one_marking();
  const QosTracker::StartedOver first_op = tracker.query_closed(2, 30 * kMs, 6 * kMs, 2 * kMs);
  EXPECT_TRUE(first_op.left_out);
  EXPECT_EQ(first_op.from, LatencyFrom::begin);
  tracker.query_abandoned(2, 3 * kMs);
  tracker.query_abandoned(1, 4 * kMs);
  auto jobs = tracker.snapshot(config, 5 * kMs);
  ASSERT_EQ(jobs.size(), 1u);
  EXPECT_EQ(jobs[0].queries, 1u);
  EXPECT_EQ(jobs[0].violations, 0u) << "the 30-ms first-op latency is not among the begin ones";
  EXPECT_EQ(jobs[0].abandoned, 2u);
  (void)tracker.query_closed(1, 4 * kMs, 6 * kMs, 6 * kMs, LatencyFrom::arrival);  // starts over
  jobs = tracker.snapshot(config, 7 * kMs);
  EXPECT_EQ(jobs[0].queries, 1u);
  EXPECT_EQ(jobs[0].abandoned, 2u);
}

// Once no connected process of the job marks, its inferred queries are what there is to measure:
// its latencies start over from first ops (a review: they were left out for good once any process
// had marked, after a restart without marks too), and a process marking again takes them back.
TEST(QosTracker, AJobsInferredQueriesCountAgainOnceNoProcessOfItMarks) {
  const config::Config config = config_with("serve", 6.0, 99.0);
  QosTracker tracker = job_of_two_processes_one_marking();
  EXPECT_TRUE(tracker.query_closed(2, 5 * kMs, 6 * kMs, 2 * kMs).left_out) << "process 1 marks, and is connected";
  tracker.client_left(1, {}, 3 * kMs);
  const QosTracker::StartedOver over = tracker.query_closed(2, 7 * kMs, 6 * kMs, 4 * kMs);
  EXPECT_FALSE(over.left_out);
  EXPECT_TRUE(over.back_to_first_op);
  EXPECT_EQ(over.dropped, 1u) << "the marked one";
  EXPECT_EQ(over.from, LatencyFrom::first_op);
  auto jobs = tracker.snapshot(config, 5 * kMs);
  ASSERT_EQ(jobs.size(), 1u);
  EXPECT_EQ(jobs[0].latency_from, LatencyFrom::first_op);
  EXPECT_EQ(jobs[0].queries, 1u);
  EXPECT_EQ(jobs[0].violations, 1u) << "the 7-ms one";
  EXPECT_FALSE(tracker.query_closed(2, 5 * kMs, 6 * kMs, 6 * kMs).back_to_first_op) << "once";
  tracker.client_seen(3, "serve", ipc::Priority::high, 7 * kMs);
  EXPECT_EQ(tracker.query_closed(3, 3 * kMs, 6 * kMs, 8 * kMs, LatencyFrom::begin).dropped, 2u);
  EXPECT_TRUE(tracker.query_closed(2, 5 * kMs, 6 * kMs, 9 * kMs).left_out);
  jobs = tracker.snapshot(config, 10 * kMs);
  EXPECT_EQ(jobs[0].latency_from, LatencyFrom::begin);
  EXPECT_EQ(jobs[0].queries, 1u);
}

// A marking process says so at its first mark: a restarted server's first query is still open when
// a process of its job that does not mark closes one, which dropped the job's marked latencies (a
// review).
TEST(QosTracker, AProcessMarksFromItsFirstMarkNotItsFirstMarkedQuery) {
  const config::Config config = config_with("serve", 6.0, 99.0);
  QosTracker tracker = job_of_two_processes_one_marking();
  tracker.client_left(1, {}, 2 * kMs);  // restarted: its successor has begun, not ended, a query
  tracker.client_seen(3, "serve", ipc::Priority::high, 3 * kMs);
  tracker.client_marks(3, 3 * kMs);
  EXPECT_TRUE(tracker.query_closed(2, 5 * kMs, 6 * kMs, 4 * kMs).left_out);
  const auto jobs = tracker.snapshot(config, 5 * kMs);
  EXPECT_EQ(jobs.at(0).latency_from, LatencyFrom::begin);
  EXPECT_EQ(jobs.at(0).queries, 1u) << "the marked one kept";
}

// The job's entry dropped (kMaxJobs) while processes of it are connected: made again, it counts
// those that mark, whether a known one or a new process brings it back (a review: a new one's
// entry counted no marking process, and its inferred queries flipped the job's latencies).
TEST(QosTracker, AJobMadeAgainCountsItsMarkingProcesses) {
  for (const bool by_new_process : {false, true}) {
    SCOPED_TRACE(by_new_process ? "made again by a new process" : "made again by a known one");
    const config::Config config = config_with("serve", 6.0, 99.0);
    QosTracker tracker;
    tracker.client_seen(1, "serve", ipc::Priority::high, 0);
    tracker.client_marks(1, 0);
    if (!by_new_process) tracker.client_seen(2, "serve", ipc::Priority::high, 0);
    for (std::uint32_t i = 0; i < QosTracker::kMaxJobs; ++i) {  // connected, all newer: serve goes
      tracker.client_seen(100 + i, "batch-" + std::to_string(i), ipc::Priority::low, 1 * kMs);
    }
    const std::vector<JobQosSnapshot> jobs = tracker.snapshot(config, 2 * kMs);
    ASSERT_TRUE(std::none_of(jobs.begin(), jobs.end(), [](const JobQosSnapshot& job) { return job.job == "serve"; }));
    if (by_new_process) tracker.client_seen(2, "serve", ipc::Priority::high, 3 * kMs);
    (void)tracker.query_closed(1, 4 * kMs, 6 * kMs, 4 * kMs, LatencyFrom::begin);
    EXPECT_TRUE(tracker.query_closed(2, 5 * kMs, 6 * kMs, 5 * kMs).left_out) << "process 1 marks";
  }
}

// A query given up on is no activity of its job: an idle job abandoned after a minute of silence
// stays idle since its latest event (a review: the abandonment made it look just active).
TEST(QosTracker, AnAbandonedQueryIsNotActivity) {
  constexpr std::int64_t kS = 1'000 * kMs;
  const config::Config config = config_with("serve", 6.0, 99.0);
  QosTracker tracker;
  tracker.client_seen(1, "serve", ipc::Priority::high, 1 * kS);
  tracker.query_abandoned(1, 61 * kS, 3);
  const auto jobs = tracker.snapshot(config, 62 * kS);
  ASSERT_EQ(jobs.size(), 1u);
  EXPECT_EQ(jobs[0].abandoned, 3u);
  EXPECT_EQ(jobs[0].idle_ns, 61 * kS);
}

// A job that begins to mark its queries: its latencies run from each begin (host time before its
// first GPU op included), one histogram of their own; then from its arrivals, another.
TEST(QosTracker, AJobThatBeginsToMarkItsQueriesStartsItsLatenciesOverAndSaysSo) {
  const config::Config config = config_with("serve", 6.0, 99.0);
  QosTracker tracker;
  tracker.client_seen(1, "serve", ipc::Priority::high, 0);
  EXPECT_EQ(tracker.query_closed(1, 3 * kMs, 6 * kMs, 1 * kMs).dropped, 0u);
  EXPECT_EQ(tracker.snapshot(config, 2 * kMs).at(0).latency_from, LatencyFrom::first_op);
  const auto marked = tracker.query_closed(1, 4 * kMs, 6 * kMs, 10 * kMs, LatencyFrom::begin);
  EXPECT_EQ(marked.dropped, 1u);
  EXPECT_EQ(marked.from, LatencyFrom::begin);
  EXPECT_EQ(tracker.snapshot(config, 11 * kMs).at(0).latency_from, LatencyFrom::begin);
  EXPECT_EQ(tracker.query_closed(1, 4 * kMs, 6 * kMs, 12 * kMs, LatencyFrom::begin).dropped, 0u) << "once";
  EXPECT_EQ(tracker.query_closed(1, 5 * kMs, 6 * kMs, 20 * kMs, LatencyFrom::arrival).dropped, 2u);
  EXPECT_EQ(tracker.snapshot(config, 21 * kMs).at(0).latency_from, LatencyFrom::arrival);
  EXPECT_EQ(std::string(latency_from_name(LatencyFrom::begin)), "begin");
}

// A reload that changes a job's target: its percentile, violations and their fraction start over at
// once, so the status never sets violations counted against 20 ms beside a 5-ms target (a user
// test read "p99 7.4 ms / 5 ms OVER (1 over, 0.07 %)" with a p90 of 5.7 ms). A reload that keeps
// the target keeps the histogram.
TEST(QosTracker, AChangedTargetStartsTheJobsLatenciesOver) {
  QosTracker tracker;
  tracker.client_seen(1, "serve", ipc::Priority::high, 0);
  tracker.client_seen(2, "other", ipc::Priority::high, 0);
  for (int i = 0; i < 100; ++i) tracker.query_closed(1, (i < 90 ? 3 : 7) * kMs, 20 * kMs, i * kMs);
  tracker.query_closed(2, 3 * kMs, std::nullopt, kMs);
  EXPECT_TRUE(tracker.retarget(config_with("serve", 20.0)).empty()) << "the same target";
  const auto over = tracker.retarget(config_with("serve", 5.0));
  ASSERT_EQ(over.size(), 1u) << "'other' had no target and still has none";
  EXPECT_EQ(over.at("serve").dropped, 100u);
  EXPECT_EQ(over.at("serve").old_target_ns, 20 * kMs);
  const auto serve = [&](std::int64_t now_ns) {
    for (const JobQosSnapshot& job : tracker.snapshot(config_with("serve", 5.0), now_ns)) {
      if (job.job == "serve") return job;
    }
    return JobQosSnapshot{};
  };
  EXPECT_EQ(serve(200 * kMs).queries, 0u);
  EXPECT_EQ(serve(200 * kMs).violations, 0u);
  for (int i = 0; i < 10; ++i) tracker.query_closed(1, (i < 8 ? 3 : 7) * kMs, 5 * kMs, 300 * kMs);
  const JobQosSnapshot after = serve(400 * kMs);
  EXPECT_EQ(after.queries, 10u);
  EXPECT_EQ(after.violations, 2u);
  EXPECT_NEAR(after.violation_fraction, 0.2, 1e-12) << "of the queries measured against 5 ms";
  // A query closed under another target than the last one's (a reload the tracker was not told of)
  // starts over too.
  const QosTracker::StartedOver closed = tracker.query_closed(1, 3 * kMs, 8 * kMs, 500 * kMs);
  EXPECT_EQ(closed.dropped, 10u);
  EXPECT_TRUE(closed.target_changed);
}

TEST(QosTracker, AJobWithATargetButNoQueryYetHasNoVerdict) {
  QosTracker tracker;
  tracker.client_seen(1, "serve", ipc::Priority::high, 0);
  const auto jobs = tracker.snapshot(config_with("serve", 5.0), kMs);
  ASSERT_EQ(jobs.size(), 1u);
  EXPECT_TRUE(jobs[0].target_ns);
  EXPECT_FALSE(jobs[0].meets_target);
  EXPECT_EQ(jobs[0].p99_ns, 0);
}

TEST(QosTracker, BestEffortProgressHasTotalsAndARateOverTheLastFiveSeconds) {
  QosTracker tracker;
  tracker.client_seen(2, "train", ipc::Priority::low, 0);
  // 10 s of one 2 ms op every 10 ms (20 % busy), then 5 s of 8 ms ops every 10 ms (80 %).
  std::int64_t now = 0;
  std::uint64_t seq = 0;
  for (; now < 10 * kS; now += 10 * kMs) tracker.work_completed(2, ran(++seq, now, now + 2 * kMs), now + 2 * kMs);
  auto train = tracker.snapshot(config::default_config(), now)[0];
  EXPECT_EQ(train.be_ops, 1000u);
  EXPECT_EQ(train.be_device_ns, 2 * kS);
  EXPECT_NEAR(train.be_ops_per_s, 100, 3);
  EXPECT_NEAR(train.be_busy_share, 0.2, 0.01);
  for (; now < 15 * kS; now += 10 * kMs) tracker.work_completed(2, ran(++seq, now, now + 8 * kMs), now + 8 * kMs);
  train = tracker.snapshot(config::default_config(), now)[0];
  EXPECT_EQ(train.be_ops, 1500u);
  EXPECT_EQ(train.be_device_ns, 6 * kS);
  EXPECT_NEAR(train.be_busy_share, 0.8, 0.03) << "the window forgot the first 10 s";
  // Idle for a while: the rate falls to zero, the totals stay.
  train = tracker.snapshot(config::default_config(), now + 6 * kS)[0];
  EXPECT_EQ(train.be_ops_per_s, 0.0);
  EXPECT_EQ(train.be_busy_share, 0.0);
  EXPECT_EQ(train.be_ops, 1500u);
}

// A long span's time is spread over the seconds it was spent in: back-to-back 3-s kernels keep a
// job about 100 % busy, not 0 % between their ends and 600 % in the slot of each.
TEST(QosTracker, ALongSpansTimeCountsWhereItWasSpent) {
  QosTracker tracker;
  tracker.client_seen(2, "train", ipc::Priority::low, 0);
  std::uint64_t seq = 0;
  for (std::int64_t start = 0; start < 30 * kS; start += 3 * kS) {
    tracker.work_completed(2, ran(++seq, start, start + 3 * kS), start + 3 * kS);
    const auto train = tracker.snapshot(config::default_config(), start + 3 * kS)[0];
    EXPECT_NEAR(train.be_busy_share, 1.0, 0.01) << "after the kernel ending at " << start + 3 * kS;
  }
  const auto train = tracker.snapshot(config::default_config(), 31 * kS)[0];
  EXPECT_NEAR(train.be_busy_share, 3.5 / 4.5, 0.01) << "3.5 s of the window's 4.5 (its slots from 26.5 s)";
}

TEST(QosTracker, CoarseCompletionsOfOneBatchCountItsIntervalOnceAndFailedOpsNotAtAll) {
  QosTracker tracker;
  tracker.client_seen(2, "train", ipc::Priority::low, 0);
  for (std::uint64_t seq = 1; seq <= 4; ++seq) tracker.work_completed(2, ran(seq, 10 * kMs, 14 * kMs, ipc::kCompletionCoarse), 15 * kMs);
  tracker.work_completed(2, ran(5, 13 * kMs, 16 * kMs, ipc::kCompletionCoarse), 17 * kMs);  // overlaps by 1 ms
  tracker.work_completed(2, ipc::CompletionDescriptor{6, 0, 0, 700, 0}, 18 * kMs);           // an error: nothing ran
  const auto train = tracker.snapshot(config::default_config(), 20 * kMs)[0];
  EXPECT_EQ(train.be_ops, 5u);
  EXPECT_EQ(train.be_device_ns, 6 * kMs);
}

// A user saw a job 168 % busy on a time-slicing device: the spans of its streams' ops were summed.
TEST(QosTracker, AJobsOverlappingOpsCountTheirInFlightTimeOnce) {
  QosTracker tracker;
  tracker.client_seen(2, "train", ipc::Priority::low, 0);
  tracker.client_seen(3, "train", ipc::Priority::low, 0);  // a second process of the job
  std::int64_t now = 0;
  std::uint64_t seq = 0;
  // Every 10 ms: ops on two streams of one process and one of the other, in flight 9 ms of the 10.
  for (; now < 5 * kS; now += 10 * kMs) {
    tracker.work_completed(2, ran(++seq, now + kMs, now + 5 * kMs), now + 5 * kMs);
    tracker.work_completed(3, ran(++seq, now + 2 * kMs, now + 9 * kMs), now + 9 * kMs);
    tracker.work_completed(2, ran(++seq, now, now + 8 * kMs), now + 9 * kMs);  // reported after a later one
  }
  auto train = tracker.snapshot(config::default_config(), now)[0];
  EXPECT_EQ(train.be_ops, 1500u);
  EXPECT_EQ(train.be_device_ns, 4500 * kMs) << "summed spans would make 9.5 s";
  EXPECT_NEAR(train.be_busy_share, 0.9, 0.03);
  // A client's clock an hour ahead: its span counts up to now, and only where nothing covered it.
  tracker.work_completed(3, ran(++seq, now - 5 * kMs, now + 3600 * kS), now + 5 * kMs);
  train = tracker.snapshot(config::default_config(), now + 5 * kMs)[0];
  EXPECT_EQ(train.be_device_ns, 4506 * kMs) << "1 ms uncovered before now, then 5 ms up to now";
  EXPECT_LE(train.be_busy_share, 1.0);
}

TEST(CoveredTime, CountsEachInstantOnceInAnyOrder) {
  CoveredTime covered;
  const std::int64_t now = 100;
  EXPECT_EQ(covered.add(0, 10, now), 10);
  EXPECT_EQ(covered.add(5, 15, now), 5);
  EXPECT_EQ(covered.add(20, 30, now), 10);
  EXPECT_EQ(covered.add(12, 22, now), 5) << "only the gap from 15 to 20";
  EXPECT_EQ(covered.add(0, 30, now), 0);
  EXPECT_EQ(covered.add(40, 40, now), 0);
  EXPECT_EQ(covered.add(50, 40, now), 0) << "an end before its start";
  EXPECT_EQ(covered.intervals(), 1u);
  EXPECT_EQ(covered.add(45, 50, now), 5);
  std::vector<std::pair<std::int64_t, std::int64_t>> pieces;
  EXPECT_EQ(covered.add(25, 60, now, [&](std::int64_t from, std::int64_t to) { pieces.emplace_back(from, to); }), 25);
  EXPECT_EQ(pieces, (std::vector<std::pair<std::int64_t, std::int64_t>>{{30, 45}, {50, 60}}));
}

// Bounded whatever a client reports: spans older than the horizon (by the daemon's clock) are
// dropped and not counted again, and past kMaxIntervals the oldest gaps are filled in.
TEST(CoveredTime, StaysBoundedAndForgetsPastItsHorizon) {
  CoveredTime covered;
  EXPECT_EQ(covered.add(0, 500, 1000), 500);
  const std::int64_t later = CoveredTime::kHorizonNs + 1000;
  EXPECT_EQ(covered.add(0, 2000, later), 1000) << "from the horizon, 1000, on: counted once";
  EXPECT_EQ(covered.intervals(), 1u) << "the old span was dropped";
  std::int64_t at = 10'000;
  for (std::size_t i = 0; i < CoveredTime::kMaxIntervals + 10; ++i, at += 10) EXPECT_EQ(covered.add(at, at + 1, later), 1);
  EXPECT_EQ(covered.intervals(), CoveredTime::kMaxIntervals);
  EXPECT_EQ(covered.add(2005, 2006, later), 0) << "a gap filled in to stay bounded counts nothing";
  EXPECT_EQ(covered.add(at - 5, at - 4, later), 1) << "the newest gaps are kept";
}

TEST(QosTracker, AJobKeepsItsNumbersAcrossReconnectsAndIdleJobsComeLast) {
  QosTracker tracker;
  tracker.client_seen(1, "serve", ipc::Priority::high, 0);
  tracker.query_closed(1, 2 * kMs, std::nullopt, kMs);
  tracker.client_left(1, GrantCounters{3, 2, 5 * kMs, 4 * kMs}, 2 * kMs);
  tracker.client_seen(2, "train", ipc::Priority::low, 3 * kMs);
  tracker.client_seen(3, "batch", ipc::Priority::low, 3 * kMs);
  tracker.client_seen(4, "api", ipc::Priority::high, 3 * kMs);
  auto jobs = tracker.snapshot(config::default_config(), 4 * kMs);
  ASSERT_EQ(jobs.size(), 4u);
  EXPECT_EQ(jobs[0].job, "api") << "connected, high priority first";
  EXPECT_EQ(jobs[1].job, "batch");
  EXPECT_EQ(jobs[2].job, "train");
  EXPECT_EQ(jobs[3].job, "serve") << "idle";
  EXPECT_EQ(jobs[3].clients, 0u);
  EXPECT_EQ(jobs[3].idle_ns, 2 * kMs);
  EXPECT_EQ(tracker.departed_counters().grants, 3u);
  EXPECT_EQ(tracker.departed_counters().held_wait_ns_max, 4 * kMs);

  tracker.client_seen(5, "serve", ipc::Priority::high, 5 * kMs);  // it comes back
  tracker.query_closed(5, 4 * kMs, std::nullopt, 6 * kMs);
  jobs = tracker.snapshot(config::default_config(), 7 * kMs);
  const auto serve = std::find_if(jobs.begin(), jobs.end(), [](const auto& j) { return j.job == "serve"; });
  ASSERT_NE(serve, jobs.end());
  EXPECT_EQ(serve->queries, 2u);
  EXPECT_EQ(serve->clients, 1u);
}

// Idle jobs: those the config gives a target first (a status cut short for size keeps them), then
// the most recently active.
TEST(QosTracker, IdleJobsWithATargetComeBeforeOtherIdleJobs) {
  QosTracker tracker;
  tracker.client_seen(1, "serve", ipc::Priority::high, 0);
  tracker.client_left(1, GrantCounters{}, kMs);
  for (ClientId id = 2; id <= 4; ++id) {
    tracker.client_seen(id, "batch-" + std::to_string(id), ipc::Priority::low, id * kMs);
    tracker.client_left(id, GrantCounters{}, id * kMs);
  }
  auto jobs = tracker.snapshot(config_with("serve", 20.0), 10 * kMs);
  ASSERT_EQ(jobs.size(), 4u);
  EXPECT_EQ(jobs[0].job, "serve") << "idle longest, but it has a target";
  EXPECT_EQ(jobs[1].job, "batch-4");
  EXPECT_EQ(jobs[3].job, "batch-2");
  jobs = tracker.snapshot(config::default_config(), 10 * kMs);
  EXPECT_EQ(jobs[3].job, "serve") << "no target now: by recency";
}

// Processes of one job at both priorities: the job is high while any connected one is, whichever
// registered last; once they all left, the next one's priority is the job's.
TEST(QosTracker, AJobIsHighWhileAnyOfItsProcessesIs) {
  QosTracker tracker;
  const auto priority = [&](std::int64_t now_ns) {
    const auto jobs = tracker.snapshot(config::default_config(), now_ns);
    return jobs.at(0).priority;
  };
  tracker.client_seen(1, "bert", ipc::Priority::high, 0);
  tracker.client_seen(2, "bert", ipc::Priority::low, kMs);
  EXPECT_EQ(priority(2 * kMs), ipc::Priority::high) << "a low process after the high one";
  tracker.client_left(1, {}, 3 * kMs);
  EXPECT_EQ(priority(3 * kMs), ipc::Priority::low) << "the high one left: only a low one is connected";
  tracker.client_left(2, {}, 3 * kMs);
  tracker.client_seen(3, "bert", ipc::Priority::low, 4 * kMs);
  EXPECT_EQ(priority(5 * kMs), ipc::Priority::low) << "all gone, then a low one";
  tracker.client_seen(4, "bert", ipc::Priority::high, 6 * kMs);
  EXPECT_EQ(priority(7 * kMs), ipc::Priority::high);
}

TEST(QosTracker, KeepsAtMostMaxJobsDroppingTheOneIdleLongest) {
  QosTracker tracker;
  ClientId id = 0;
  for (std::size_t i = 0; i < QosTracker::kMaxJobs; ++i) {
    ++id;
    tracker.client_seen(id, "job-" + std::to_string(i), ipc::Priority::low, static_cast<std::int64_t>(i));
    if (i != 0) tracker.client_left(id, {}, static_cast<std::int64_t>(i));  // job-0 stays connected
  }
  EXPECT_EQ(tracker.job_count(), QosTracker::kMaxJobs);
  tracker.client_seen(++id, "newcomer", ipc::Priority::low, 1000);
  EXPECT_EQ(tracker.job_count(), QosTracker::kMaxJobs);
  const auto jobs = tracker.snapshot(config::default_config(), 2000);
  const auto named = [&](const std::string& name) {
    return std::any_of(jobs.begin(), jobs.end(), [&](const auto& j) { return j.job == name; });
  };
  EXPECT_TRUE(named("newcomer"));
  EXPECT_TRUE(named("job-0")) << "connected: kept although oldest";
  EXPECT_FALSE(named("job-1")) << "the idle one idle longest";
  EXPECT_TRUE(named("job-2"));
}

// A user test: after a service (target 20 ms) had run and gone, 270 best-effort processes of names of
// their own (batch jobs named by their scheduler's id) dropped its p99 and violations from status and
// metrics. A job with measured queries goes only once every job without clients has some.
TEST(QosTracker, AJobsLatencyRecordOutlastsAFloodOfBestEffortNames) {
  QosTracker tracker;
  tracker.client_seen(1, "serve", ipc::Priority::high, 0);
  (void)tracker.query_closed(1, 3 * kMs, 20 * kMs, 1);
  (void)tracker.query_closed(1, 30 * kMs, 20 * kMs, 2);
  tracker.client_left(1, {}, 3);  // idle longest from here on
  ClientId id = 1;
  for (std::size_t i = 0; i < QosTracker::kMaxJobs + 14; ++i) {
    ++id;
    tracker.client_seen(id, "batch-" + std::to_string(i), ipc::Priority::low, 10 + static_cast<std::int64_t>(i));
    tracker.client_left(id, {}, 10 + static_cast<std::int64_t>(i));
  }
  EXPECT_EQ(tracker.job_count(), QosTracker::kMaxJobs);
  const auto jobs = tracker.snapshot(config::default_config(), 1000);
  const auto serve = std::find_if(jobs.begin(), jobs.end(), [](const auto& j) { return j.job == "serve"; });
  ASSERT_NE(serve, jobs.end()) << "its latency record kept";
  EXPECT_EQ(serve->queries, 2u);
  EXPECT_EQ(serve->violations, 1u);
}

TEST(GrantCounters, AddUpWithTheLongestWait) {
  GrantCounters total{1, 2, 30, 20};
  total += GrantCounters{4, 5, 60, 10};
  EXPECT_EQ(total.grants, 5u);
  EXPECT_EQ(total.ops_held, 7u);
  EXPECT_EQ(total.held_wait_ns_total, 90);
  EXPECT_EQ(total.held_wait_ns_max, 20);
}

}  // namespace
}  // namespace gpuqos::scheduler
