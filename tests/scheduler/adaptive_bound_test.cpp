// Tests of the adaptation rule of the best-effort backlog bound: it steps at most once per
// kEvery queries (once per kWindow after a step), stays within [min, max], and converges with a latency model where the tail grows
// with the bound.
#include "gpuqos/scheduler/adaptive_bound.h"

#include <gtest/gtest.h>

#include <random>

namespace gpuqos::scheduler {
namespace {

constexpr std::int64_t kMs = 1'000'000;

BaymaxOptions adaptive(std::int64_t start_ns) {
  BaymaxOptions o;
  o.adaptation = true;
  o.be_backlog_bound_ns = start_ns;
  o.min_backlog_bound_ns = 1 * kMs;
  o.max_backlog_bound_ns = 20 * kMs;
  o.adapt_step_ns = kMs / 2;
  return o;
}

TEST(AdaptiveBound, OffKeepsTheConfiguredBound) {
  BaymaxOptions o = adaptive(5 * kMs);
  o.adaptation = false;
  AdaptiveBound bound(o);
  for (int i = 0; i < 100; ++i) EXPECT_FALSE(bound.observe(1, 50 * kMs, 10 * kMs, 99));
  EXPECT_EQ(bound.bound_ns(), 5 * kMs);
}

TEST(AdaptiveBound, StepsOncePerBatchOfQueriesAndStaysWithinLimits) {
  AdaptiveBound bound(adaptive(2 * kMs));
  int moves = 0;
  for (int i = 0; i < 100 * static_cast<int>(AdaptiveBound::kWindow); ++i) moves += bound.observe(1, 20 * kMs, 10 * kMs, 99);
  EXPECT_EQ(bound.bound_ns(), 1 * kMs) << "over target: down to the minimum";
  EXPECT_EQ(moves, 2);
  for (int i = 0; i < 100 * static_cast<int>(AdaptiveBound::kWindow); ++i) (void)bound.observe(1, 1 * kMs, 10 * kMs, 99);
  EXPECT_EQ(bound.bound_ns(), 20 * kMs) << "plenty of slack: up to the maximum";
}

// A review: the window was not cleared after a step, and p99 over 64 latencies is their largest,
// so one slow query stayed in it for four checks and stepped the bound down four times; with the
// tail in the band after it, nothing took the steps back. Now one query over the target is one step.
TEST(AdaptiveBound, OneSlowQueryMovesTheBoundOneStep) {
  constexpr std::int64_t kInBand = 7500 * kMs / 1000;  // 0.75 x the target
  AdaptiveBound bound(adaptive(10 * kMs));
  for (int i = 0; i < 640; ++i) ASSERT_FALSE(bound.observe(1, kInBand, 10 * kMs, 99)) << "in the band";
  int moves = bound.observe(1, 12 * kMs, 10 * kMs, 99);
  for (int i = 0; i < 640; ++i) moves += bound.observe(1, kInBand, 10 * kMs, 99);
  EXPECT_EQ(moves, 1);
  EXPECT_EQ(bound.bound_ns(), 10 * kMs - kMs / 2);
}

// After a step the job that made it judges again only by a whole window under the new bound: over
// its target, it steps the bound down once per kWindow queries, not once per kEvery.
TEST(AdaptiveBound, AfterAStepTheNextVerdictIsOfAWholeWindow) {
  AdaptiveBound bound(adaptive(10 * kMs));
  int moves = 0;
  for (std::size_t i = 0; i < AdaptiveBound::kEvery; ++i) moves += bound.observe(1, 20 * kMs, 10 * kMs, 99);
  ASSERT_EQ(moves, 1);
  for (std::size_t i = 0; i + 1 < AdaptiveBound::kWindow; ++i) ASSERT_FALSE(bound.observe(1, 20 * kMs, 10 * kMs, 99)) << i;
  EXPECT_TRUE(bound.observe(1, 20 * kMs, 10 * kMs, 99));
}

// A review of the first form of the rule above, which restarted every job's window at a step: A,
// meeting its target easily and querying ten times as often as B, stepped the bound up before B's
// window filled again, and B, three times over its target, had no verdict to stop it (the bound
// went to its 20-ms maximum). Only the window that moved it restarts: B's verdict holds it down.
TEST(AdaptiveBound, AStepByOneJobDoesNotSilenceAnotherOverItsTarget) {
  AdaptiveBound bound(adaptive(10 * kMs));
  for (int i = 0; i < 2000; ++i) {
    for (int a = 0; a < 10; ++a) (void)bound.observe(1, 4 * kMs, 100 * kMs, 99);
    (void)bound.observe(2, 30 * kMs, 10 * kMs, 99);
  }
  EXPECT_EQ(bound.bound_ns(), 1 * kMs) << "B's tail is over its target whatever the bound: down to the minimum";
}

// gpuqosd reconfigures the policy for a reload and for a GPU renumbered (device_table.h): other
// settings changing leave the adapted bound where it is; its own restart it.
TEST(AdaptiveBound, KeepsWhatItLearnedUnlessItsOwnSettingsChange) {
  BaymaxOptions o = adaptive(2 * kMs);
  AdaptiveBound bound(o);
  for (int i = 0; i < 100 * static_cast<int>(AdaptiveBound::kWindow); ++i) (void)bound.observe(1, 1 * kMs, 10 * kMs, 99);
  ASSERT_EQ(bound.bound_ns(), 20 * kMs);
  o.timeslice_ns = 8 * kMs;
  o.preemptive_devices = 2;
  bound.configure(o);
  EXPECT_EQ(bound.bound_ns(), 20 * kMs) << "not the bound's settings";
  o.adapt_step_ns = kMs;
  bound.configure(o);
  EXPECT_EQ(bound.bound_ns(), 2 * kMs) << "a new step: from the configured bound again";
}

// Queries take 3 ms plus up to the bound of best-effort work ahead of them (uniform): their p99 is
// about 3 ms + bound. Target 10 ms: the band [0.6, 0.9] x 10 ms holds the p99 for bounds in
// [3, 6] ms, and the bound must settle there from either side and stay.
TEST(AdaptiveBound, ConvergesIntoTheBandWhereTheTailMeetsTheTarget) {
  for (std::int64_t start : {1 * kMs, 20 * kMs}) {
    AdaptiveBound bound(adaptive(start));
    std::mt19937_64 rng(7);
    std::uniform_real_distribution<double> ahead(0.0, 1.0);
    std::int64_t low = 20 * kMs, high = 0;
    for (int i = 0; i < 5000; ++i) {
      const auto latency = 3 * kMs + static_cast<std::int64_t>(ahead(rng) * static_cast<double>(bound.bound_ns()));
      (void)bound.observe(1, latency, 10 * kMs, 99);
      if (i >= 3000) {
        low = std::min(low, bound.bound_ns());
        high = std::max(high, bound.bound_ns());
      }
    }
    EXPECT_GE(low, 3 * kMs) << "from " << start;
    EXPECT_LE(high, 6 * kMs) << "from " << start;
    EXPECT_LE(high - low, 1 * kMs) << "settled, not oscillating across the band";
  }
}

// Two jobs with targets, one bound: it serves the job nearest its target. A (target 100 ms, tail
// 4 ms whatever the bound) queries ten times as often as B (target 10 ms, 3 ms + the bound, as
// above). A's verdicts to loosen out-voted B's to tighten: the bound went to its 20-ms maximum and
// B's tail stayed at 2.3x its target. Now A's alone never raise it, and it settles in B's band.
// Also when the easy jobs together check 70 times as often as B: a verdict was stale after 64
// checks of any job, so B's always was, and the bound went to its maximum (a review; now a job's
// verdict lasts four of its own intervals between checks).
TEST(AdaptiveBound, WithSeveralJobsTheOneNearestItsTargetHoldsTheBound) {
  for (const int easy_per_b : {10, 70}) {
    SCOPED_TRACE(std::to_string(easy_per_b) + " easy queries per query of B");
    AdaptiveBound bound(adaptive(10 * kMs));
    std::mt19937_64 rng(7);
    std::uniform_real_distribution<double> ahead(0.0, 1.0);
    std::int64_t low = 20 * kMs, high = 0;
    for (int i = 0; i < 5000; ++i) {
      for (int a = 0; a < easy_per_b; ++a) (void)bound.observe(10 + a % 7, 4 * kMs, 100 * kMs, 99);
      const auto latency = 3 * kMs + static_cast<std::int64_t>(ahead(rng) * static_cast<double>(bound.bound_ns()));
      (void)bound.observe(2, latency, 10 * kMs, 99);
      if (i >= 3000) {
        low = std::min(low, bound.bound_ns());
        high = std::max(high, bound.bound_ns());
      }
    }
    EXPECT_GE(low, 3 * kMs);
    EXPECT_LE(high, 6 * kMs) << "B's band, where its tail meets its target";
  }
}

// B gone (forgotten), or silent for four of its intervals: the easy job's verdicts raise it again.
TEST(AdaptiveBound, AJobGoneOrSilentNoLongerHoldsTheBoundDown) {
  AdaptiveBound bound(adaptive(10 * kMs));
  std::mt19937_64 rng(7);
  std::uniform_real_distribution<double> ahead(0.0, 1.0);
  for (int i = 0; i < 3000; ++i) {
    for (int a = 0; a < 10; ++a) (void)bound.observe(1, 4 * kMs, 100 * kMs, 99);
    const auto latency = 3 * kMs + static_cast<std::int64_t>(ahead(rng) * static_cast<double>(bound.bound_ns()));
    (void)bound.observe(2, latency, 10 * kMs, 99);
  }
  ASSERT_LE(bound.bound_ns(), 6 * kMs);
  AdaptiveBound silent = bound;  // B stops querying without leaving
  for (int i = 0; i < 100 * static_cast<int>(AdaptiveBound::kWindow); ++i) (void)silent.observe(1, 4 * kMs, 100 * kMs, 99);
  EXPECT_EQ(silent.bound_ns(), 20 * kMs);
  bound.forget(2);
  for (int i = 0; i < 100 * static_cast<int>(AdaptiveBound::kWindow); ++i) (void)bound.observe(1, 4 * kMs, 100 * kMs, 99);
  EXPECT_EQ(bound.bound_ns(), 20 * kMs);
}

}  // namespace
}  // namespace gpuqos::scheduler
