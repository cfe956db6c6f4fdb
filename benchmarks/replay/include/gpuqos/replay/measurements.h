// What the replayer measures: latency summaries (percentiles) and seeded Poisson arrivals.
#pragma once

#include <cstdint>
#include <vector>

namespace gpuqos::replay {

struct LatencySummary {
  std::uint64_t count = 0;
  double mean_ms = 0;
  double p50_ms = 0;
  double p90_ms = 0;
  double p99_ms = 0;
  double min_ms = 0;
  double max_ms = 0;
};

// Nearest-rank percentiles (p99 of 20 values is the largest). All zero when empty.
LatencySummary summarize(std::vector<double> values_ms);

// Gaps between arrivals of a Poisson process, from a seeded generator that gives the same
// sequence on every platform (no std:: distribution, whose output is implementation-defined).
class PoissonArrivals {
 public:
  PoissonArrivals(double rate_per_s, std::uint64_t seed);
  double next_gap_s();

 private:
  double rate_per_s_;
  std::uint64_t state_;
};

}  // namespace gpuqos::replay
