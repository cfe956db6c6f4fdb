// Latency summaries (nearest-rank percentiles) and the seeded Poisson arrival process.
#include <gtest/gtest.h>

#include <cmath>

#include "gpuqos/replay/measurements.h"

namespace gpuqos::replay {
namespace {

TEST(LatencySummary, NearestRankPercentiles) {
  std::vector<double> values;
  for (int i = 100; i >= 1; --i) values.push_back(i);  // unsorted on purpose
  const LatencySummary s = summarize(values);
  EXPECT_EQ(s.count, 100u);
  EXPECT_DOUBLE_EQ(s.mean_ms, 50.5);
  EXPECT_DOUBLE_EQ(s.p50_ms, 50);
  EXPECT_DOUBLE_EQ(s.p90_ms, 90);
  EXPECT_DOUBLE_EQ(s.p99_ms, 99);
  EXPECT_DOUBLE_EQ(s.min_ms, 1);
  EXPECT_DOUBLE_EQ(s.max_ms, 100);
  EXPECT_DOUBLE_EQ(summarize({7.0}).p99_ms, 7.0);
  EXPECT_EQ(summarize({}).count, 0u);
}

TEST(PoissonArrivals, SeededMeanMatchesRate) {
  PoissonArrivals a(200.0, 42), b(200.0, 42), c(200.0, 43);
  double sum = 0, sum_sq = 0;
  const int n = 20000;
  bool differs = false;
  for (int i = 0; i < n; ++i) {
    const double gap = a.next_gap_s();
    EXPECT_EQ(gap, b.next_gap_s());
    differs |= gap != c.next_gap_s();
    EXPECT_GE(gap, 0.0);
    sum += gap;
    sum_sq += gap * gap;
  }
  EXPECT_TRUE(differs);
  const double mean = sum / n;
  EXPECT_NEAR(mean, 1.0 / 200, 0.05 / 200);
  const double cv = std::sqrt(sum_sq / n - mean * mean) / mean;  // exponential: cv = 1
  EXPECT_NEAR(cv, 1.0, 0.05);
  EXPECT_THROW(PoissonArrivals(0.0, 1), std::invalid_argument);
}

}  // namespace
}  // namespace gpuqos::replay
