// Mean and spread of log2 durations over about the last `window` values, in O(1) time and space:
// the global default for kernels never seen (a crude answer, flagged global_default).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>

namespace gpuqos::predictor {

struct LogMoments {
  double count = 0;
  double mean = 0;
  double mean_square = 0;

  void add(double log2_value, std::uint32_t window) {
    count += 1;
    const double rate = 1.0 / std::min(count, double(std::max<std::uint32_t>(window, 1)));
    mean += (log2_value - mean) * rate;
    mean_square += (log2_value * log2_value - mean_square) * rate;
  }
  double stddev() const { return std::sqrt(std::max(0.0, mean_square - mean * mean)); }
  // The p-quantile if the log2 values were normal (z = 1.2816 for p90).
  double upper(double z = 1.2816) const { return mean + z * stddev(); }
};

}  // namespace gpuqos::predictor
