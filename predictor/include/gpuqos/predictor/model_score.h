// A candidate model's validation score: its mean |log2(predicted / measured)| over about the last
// `window` observations it predicted before learning them (test-then-train).
#pragma once

#include <algorithm>
#include <cstdint>

namespace gpuqos::predictor {

struct ModelScore {
  double mean_abs_log2_error = 0;
  std::uint64_t count = 0;

  void add(double abs_log2_error, std::uint32_t window) {
    // Saturates: a count that wrapped to 0 divided by zero, and the NaN mean then refused every
    // later save of the store (a review, with a store whose count was 2^64 - 1).
    if (count < UINT64_MAX) ++count;
    const auto n = double(std::min<std::uint64_t>(count, std::max<std::uint32_t>(window, 1)));
    mean_abs_log2_error += (abs_log2_error - mean_abs_log2_error) / n;
  }
};

}  // namespace gpuqos::predictor
